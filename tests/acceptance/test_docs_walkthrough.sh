#!/usr/bin/env bash
# docs/getting-started.md and docs/cli.md's quick examples, followed literally.
# Under valgrind (make check-valgrind): SBX_VALGRIND_SKIP="the ASan run covers its CLI calls; it parses nothing hostile"
. "$(dirname "$0")/lib.sh"
need_root
cd "$T/host"

run "run python3 prints 1" 0 "$SBX" run -- python3 -c 'print(1)'
check "run python3: stdout is exactly 1" [ "$OUT" = 1 ]
run "run echo hello" 0 "$SBX" run -- echo hello
check "stdout hello" [ "$OUT" = hello ]
run "exit status passes through" 7 "$SBX" run -- sh -c 'exit 7'
check "single quotes stay literal" [ "$("$SBX" run --no-stdin -- echo '$HOME')" = '$HOME' ]
check "stdin is passed" [ "$(echo data | "$SBX" run -- wc -c)" = 5 ]
run "timeout is 124" 124 "$SBX" run --timeout 1 -- sleep 30
check "timeout message" has "$ERR" "sbx: command timed out after 1s"
run "local provider --json" 3 "$SBX" run --provider local --json -- sh -c 'exit 3'
check "json has return_code 3" has "$OUT" '"return_code": 3'

run "create" 0 "$SBX" create --workdir /tmp/w --label job=eval --ttl 3600 -e MODE=fast
id=$OUT
check "create prints an id" has "$id" sbx-
run "exec ls" 0 "$SBX" exec "$id" -- ls -la
run "exec sees -e env" 0 "$SBX" exec "$id" -- sh -c 'echo $MODE > out.txt'
echo a,b >data.csv
run "cp into the box (absolute)" 0 "$SBX" cp ./data.csv "$id":/tmp/w/data.csv
run "cat it back" 0 "$SBX" exec "$id" -- cat data.csv
check "content round trip" [ "$OUT" = a,b ]
mkdir -p dataset/sub && echo x >dataset/sub/f && chmod 750 dataset/sub
run "cp a directory in" 0 "$SBX" cp ./dataset "$id":data
run "directory mode kept" 0 "$SBX" exec "$id" -- stat -c %a /tmp/w/data/sub
check "mode 750" [ "$OUT" = 750 ]
mkdir outd
run "cp a file out into a directory" 0 "$SBX" cp "$id":out.txt ./outd/
check "out.txt has the env value" [ "$(cat outd/out.txt)" = fast ]
run "ls --label" 0 "$SBX" ls --label job=eval
check "ls lists the box" has "$OUT" "$id"
run "ls --json" 0 "$SBX" ls --json
run "status" 0 "$SBX" status "$id"
check "status running" has "$OUT" running
run "stop" 0 "$SBX" stop "$id"
run "exec after stop: no such box" 3 "$SBX" exec "$id" -- true
check "no-such-box message names the id" has "$ERR" "no such box"
run "gc with nothing to do" 0 "$SBX" gc
census "after create/exec/cp/stop"

# spec.files with a relative path lands in the workdir (docs/python.md's example, via the CLI).
printf 'print("hi")\n' >hello.py
run "run with --file relative to workdir" 0 "$SBX" run --workdir /tmp/work --file hello.py="$T/host/hello.py" -- python3 hello.py
check "the startup file ran" [ "$OUT" = hi ]

"$ROOT/scripts/make-test-rootfs.sh" bb.tar
run "image import" 0 "$SBX" image import --no-progress bb bb.tar
run "run --image bb" 0 "$SBX" run --image bb -- cat /etc/image-name
check "marker file from the image" [ "$OUT" = sbx-test ]
run "image ls" 0 "$SBX" image ls
check "image ls lists bb" has "$OUT" bb
run "image rm" 0 "$SBX" image rm bb
run "run --image bb after rm" 125 "$SBX" run --image bb -- true
check "unknown image says to import it" has "$ERR" "sbx image import"

finish
