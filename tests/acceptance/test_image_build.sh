#!/bin/bash
# `sbx commit` and `sbx image build` through the CLI (docs/images.md "Commit
# and build"): a 5-step Sbxfile builds and runs; a rebuild is all CACHED and
# starts no box; changing a COPY'd file reruns from that step; a failed RUN
# stops with its status and output and leaves no box; a bad Sbxfile's error
# names its line; COPY cannot leave the context. Busybox images built here.
# Under valgrind (make check-valgrind): SBX_VALGRIND_SKIP="the ASan run covers its CLI calls; fuzz_sbxfile covers the Sbxfile parser"
. "$(dirname "$0")/lib.sh"
need_root
[ -x /bin/busybox ] || skip_all "busybox-static is not installed"

bb=$T/bb
mkdir -p $bb/bin $bb/etc $bb/tmp
cp /bin/busybox $bb/bin/
for a in $(/bin/busybox --list); do [ $a = busybox ] || ln -s busybox $bb/bin/$a; done
echo 'root:x:0:0:root:/root:/bin/sh' > $bb/etc/passwd; echo 'root:x:0:' > $bb/etc/group
echo image > $bb/etc/marker
tar -C $bb -cf $T/bb.tar .
run "import busybox" 0 "$SBX" image import bb $T/bb.tar

# --- commit through the CLI ------------------------------------------------
run "create a box" 0 "$SBX" create --image bb
id=$OUT
run "change it" 0 "$SBX" exec "$id" -- sh -c 'echo hi > /hello && rm /etc/marker'
run "commit it" 0 "$SBX" commit --change 'ENV GREETING=hello' --change 'WORKDIR /srv' "$id" mine:v1
check "commit prints the image id" has "$OUT" "sha256:"
run "commit json" 0 "$SBX" commit --json "$id" mine:v2
check "commit --json says layers 2" has "$OUT" '"layers": 2'
run "stop the box" 0 "$SBX" stop "$id"
run "a box of the commit sees the file and the deletion" 0 "$SBX" run --image mine:v1 -- sh -c 'cat /hello; test ! -e /etc/marker && echo gone'
check "  output" [ "$OUT" = "$(printf 'hi\ngone')" ]
run "the change is in the config" 0 "$SBX" image inspect mine:v1
check "  ENV" has "$OUT" "GREETING=hello"
check "  WORKDIR" has "$OUT" '"/srv"'
run "commit of no box" 1 "$SBX" commit no-such-box x
check "  says so" has "$ERR" "no box"
run "commit with a bad change" 2 "$SBX" commit "$id" x --change 'ADD a b'

# --- build -----------------------------------------------------------------
ctx=$T/ctx
mkdir -p $ctx/dir/sub
echo one > $ctx/a.txt
echo deep > $ctx/dir/sub/d.txt
printf '#!/bin/sh\necho script ran\n' > $ctx/dir/s.sh; chmod 755 $ctx/dir/s.sh
cat > $ctx/Sbxfile <<'SBX'
# five steps and a config tail
FROM bb
RUN echo built > /built && \
    echo "$((1+1))" > /two
COPY a.txt /data/
COPY a.txt /etc
ENV MODE=prod
WORKDIR /app
COPY dir /app/
RUN ./s.sh > /ran && cat /data/a.txt > copied && echo "$MODE" > /mode
CMD ["cat", "/app/copied"]
SBX
run "build" 0 "$SBX" image build -t app:1 $ctx
check "  every step shown" has "$OUT" "Step 9/9 : CMD"
check "  nothing cached the first time" [ "$(grep -c CACHED <<<"$OUT")" = 0 ]
check "  tagged" has "$OUT" "Successfully tagged app:1"
run "run the built image" 0 "$SBX" run --image app:1 -- sh -c 'cat /built /two /data/a.txt /etc/a.txt /app/copied /ran /mode /app/sub/d.txt; pwd; echo $MODE; test -x /app/s.sh && echo exec'
check "  output" [ "$OUT" = "$(printf 'built\n2\none\none\none\nscript ran\nprod\ndeep\n/app\nprod\nexec')" ]
run "run --image with no CMD runs the image's own (CMD [cat, /app/copied])" 0 "$SBX" run --image app:1
check "  its output" [ "$OUT" = one ]
run "--entrypoint in place of the image's own" 0 "$SBX" run --image app:1 --entrypoint cat -- /mode
check "  PROG ran with CMD's words, not the image's Cmd" [ "$OUT" = prod ]
run "--entrypoint alone: the image's Cmd is dropped too (as docker)" 0 "$SBX" run --image app:1 --entrypoint pwd
check "  its output" [ "$OUT" = /app ]
run "an image with neither Entrypoint nor Cmd, and no CMD" 2 "$SBX" run --image bb
check "  says so, and what to give" has "$ERR" "image bb has neither Entrypoint nor Cmd: give one (sbx run --image bb -- CMD...)"
check "  and leaves no box" [ -z "$(ls -A "$SBX_STATE_DIR/linux/boxes" 2>/dev/null)" ]
run "inspect the built image" 0 "$SBX" image inspect app:1
check "  CMD" has "$OUT" '"/app/copied"'
check "  image ls hides the build cache" [ -z "$("$SBX" image ls -q | grep '^sbx-build-cache:')" ]
check "  image ls -a lists it (one per RUN and COPY)" [ "$("$SBX" image ls -a -q | grep -c '^sbx-build-cache:')" = 6 ]
images_before=$("$SBX" image ls -a -q | sort)
layers_before=$(ls "$SBX_STATE_DIR/linux/images/layers" | sort)
run "rebuild" 0 "$SBX" image build -t app:1 $ctx
check "  every RUN and COPY CACHED" [ "$(grep -c -- '---> CACHED' <<<"$OUT")" = 6 ]
check "  no step ran: no new image, no new layer" [ "$("$SBX" image ls -a -q | sort)" = "$images_before" -a "$(ls "$SBX_STATE_DIR/linux/images/layers" | sort)" = "$layers_before" ]
run "rebuild --no-cache" 0 "$SBX" image build --no-cache -t app:nc $ctx
check "  nothing CACHED" [ "$(grep -c CACHED <<<"$OUT")" = 0 ]
run "  same result" 0 "$SBX" run --image app:nc -- cat /app/copied /mode
check "  output" [ "$OUT" = "$(printf 'one\nprod')" ]
echo two > $ctx/a.txt
run "rebuild after a COPY'd file changed" 0 "$SBX" image build -t app:2 $ctx
check "  the steps before it cached" [ "$(grep -c -- '---> CACHED' <<<"$OUT")" = 1 ]
run "the new image has the new file" 0 "$SBX" run --image app:2 -- cat /app/copied
check "  output" [ "$OUT" = two ]
run "the old image keeps the old one" 0 "$SBX" run --image app:1 -- cat /app/copied
check "  output" [ "$OUT" = one ]

# --- failures --------------------------------------------------------------
printf 'FROM bb\nRUN echo before\nRUN echo oops >&2; exit 7\nRUN echo never\n' > $ctx/Fail
run "a failed RUN stops the build with its status" 7 "$SBX" image build -f $ctx/Fail $ctx
check "  its output shown" has "$ERR" "oops"
check "  the line named" has "$ERR" "line 3"
check "  later steps not run" bash -c "! grep -q never <<<'$OUT'"
check "  no box left" [ -z "$(ls -A "$SBX_STATE_DIR/linux/boxes" 2>/dev/null)" ]
printf 'FROM bb\nRUN true\n\nADD x /y\n' > $ctx/Bad
run "a bad Sbxfile" 2 "$SBX" image build -f $ctx/Bad $ctx
check "  names the line" has "$ERR" "line 4: ADD is not supported"
printf 'FROM bb\nCOPY ../bb.tar /x\n' > $ctx/Esc
run "COPY .. refused" 2 "$SBX" image build -f $ctx/Esc $ctx
check "  says why" has "$ERR" "leaves the build context"
ln -s /etc $ctx/etclink
printf 'FROM bb\nCOPY etclink/passwd /x\n' > $ctx/Esc2
run "COPY through a link out of the context refused" 1 "$SBX" image build -f $ctx/Esc2 $ctx
check "  says why" has "$ERR" "outside the build context"
rm $ctx/etclink
printf 'FROM bb\nRUN a \\\n' > $ctx/Cont
run "a continuation at the end of the file" 127 "$SBX" image build -f $ctx/Cont $ctx
# SIGINT mid-RUN: the step's box is stopped, exit 130, the earlier steps stay cached.
printf 'FROM bb\nRUN echo first > /first\nRUN sleep 600\n' > $ctx/Slow
# (a background job starts with SIGINT ignored: env restores the default first)
env --default-signal=INT,TERM,HUP "$SBX" image build -f $ctx/Slow $ctx >"$T/slow.out" 2>"$T/slow.err" </dev/null &
pid=$!
for i in $(seq 1 600); do
  grep -q "Step 3/3" "$T/slow.out" 2>/dev/null && [ -n "$(ls -A "$SBX_STATE_DIR/linux/boxes" 2>/dev/null)" ] && break
  sleep 0.1
done
kill -INT $pid; wait $pid; RC=$?
kill -KILL $pid 2>/dev/null
check "SIGINT stops the build: 130" [ "$RC" = 130 ]
check "  says so" grep -q "interrupted by SIGINT" "$T/slow.err"
check "  no box left" [ -z "$(ls -A "$SBX_STATE_DIR/linux/boxes" 2>/dev/null)" ]
printf 'FROM bb\nRUN echo first > /first\n' > $ctx/Slow2
run "  the step before it is cached" 0 "$SBX" image build -f $ctx/Slow2 $ctx
check "  CACHED" has "$OUT" "---> CACHED"
check "no store temporaries left" [ -z "$(ls -d "$SBX_STATE_DIR"/linux/images/tmp-* 2>/dev/null)" ]
finish
