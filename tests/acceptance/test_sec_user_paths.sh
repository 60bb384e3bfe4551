#!/usr/bin/env bash
# Another local user against the host paths root's sbx uses on its behalf
# (issue #21): a real unprivileged user (sbxatk-pr) owns a build context and
# flips a file in it between a regular file and a link to a root-only secret
# while root builds: no COPY may put the secret in an image, and a COPY's
# bytes are the bytes its cache key hashed. The same user owns a directory on
# the way to a volume's source: a link there (planted, or swapped in while
# root creates boxes) must never aim root's read-write mount at another
# directory. The user is made here and removed at the end, even on failure.
# The races are counted in iterations, never timed.
# Under valgrind (make check-valgrind): SBX_VALGRIND_SKIP="70 builds and creates racing another user; the ASan pass runs it"
. "$(dirname "$0")/lib.sh"
need_root
command -v useradd >/dev/null && command -v runuser >/dev/null || skip_all "useradd/runuser missing"
[ -x /bin/busybox ] || skip_all "busybox-static is not installed"

ATK=sbxatk-pr
W=/tmp/sbxatk-pr # the attacker's own directory ($T is root's, 0700)
FLIP=
# A flipping loop runs as the attacker until root leaves $W/stop.
stop_flip() { if [ -n "$FLIP" ]; then touch "$W/stop"; wait "$FLIP" 2>/dev/null; rm -f "$W/stop"; FLIP=; fi; }
cleanup_user() {
  stop_flip
  rm -rf "$W"
  userdel -r "$ATK" >/dev/null 2>&1
  true
}
trap cleanup_user EXIT
id "$ATK" >/dev/null 2>&1 || useradd -M -d /nonexistent -s /bin/sh "$ATK" || skip_all "useradd $ATK failed"
AUID=$(id -u $ATK)
as() { local u=$1; shift; runuser -u "$u" -- env -u SBX_STATE_DIR -u XDG_RUNTIME_DIR -u TMPDIR HOME=/tmp "$@"; }
rm -rf "$W"
mkdir -m 0755 "$W" && chown "$ATK:" "$W"

# Root's secret: in root's private directory, readable by root only.
SECRET="root-only-$RANDOM$RANDOM$RANDOM"
SEC=$T/secret
echo "$SECRET" >"$SEC"
chmod 600 "$SEC"

bb=$T/bb
mkdir -p $bb/bin $bb/etc $bb/tmp
cp /bin/busybox $bb/bin/
for a in $(/bin/busybox --list); do [ $a = busybox ] || ln -s busybox $bb/bin/$a; done
echo 'root:x:0:0:root:/root:/bin/sh' >$bb/etc/passwd; echo 'root:x:0:' >$bb/etc/group
tar -C $bb -cf $T/bb.tar .
run "import busybox" 0 "$SBX" image import bb $T/bb.tar

# Nothing of the secret in any image sbx holds (layers, blobs, records).
no_secret_in_store() { ! grep -rqsF "$SECRET" "$SBX_STATE_DIR/linux/images"; }

# --- 1. COPY while the context's owner flips a file and a link to the secret ---
ctx=$W/ctx
as $ATK sh -c "set -e; mkdir -p $ctx/d $W/stage; echo benign >$ctx/f; echo benign >$ctx/d/f"
printf 'FROM bb\nCOPY f /x\nCOPY d /d/\n' >$T/Sbxfile
# Renames, so `f` always exists: a regular file, then a link to the secret.
as $ATK nice -n 10 sh -c "while [ ! -e $W/stop ]; do
  ln -sfn $SEC $W/stage/l1; mv -T $W/stage/l1 $ctx/f
  ln -sfn $SEC $W/stage/l2; mv -T $W/stage/l2 $ctx/d/f
  echo benign >$W/stage/r1; mv -T $W/stage/r1 $ctx/f
  echo benign >$W/stage/r2; mv -T $W/stage/r2 $ctx/d/f
done" &
FLIP=$!
built=0 refused=0 other=""
for i in $(seq 1 40); do
  "$SBX" image build --no-cache -f $T/Sbxfile $ctx >"$T/b.out" 2>"$T/b.err" </dev/null
  rc=$?
  if [ $rc = 0 ]; then
    built=$((built + 1))
  elif grep -qE "symbolic link|outside the build context" "$T/b.err"; then
    refused=$((refused + 1))
  else
    other="$other [rc $rc: $(head -c 300 "$T/b.err")]"
  fi
  [ $built -ge 8 ] && break
done
stop_flip
check "race: builds ran to the end while the file flipped ($built built, $refused refused)" [ $built -gt 0 ]
check "race: every failed build was a refusal naming the link${other:+:$other}" [ -z "$other" ]
check "race: the secret is in no image" no_secret_in_store
echo benign >"$T/benign"
run "race over: a build of the regular file" 0 "$SBX" image build -t raced:1 -f $T/Sbxfile $ctx
run "  its image has the regular file's bytes" 0 "$SBX" run --image raced:1 -- cat /x /d/f
check "  output" [ "$OUT" = "$(printf 'benign\nbenign')" ]

# --- 2. a COPY's bytes are the bytes its cache key hashed ---
# The owner flips `f` between two contents; each build caches its image
# under the key of the bytes it hashed. Afterwards, a cached build of each
# content must give an image holding that content.
as $ATK sh -c "echo AAAA >$ctx/f"
printf 'FROM bb\nCOPY f /x\n' >$T/Sbxfile2
as $ATK nice -n 10 sh -c "while [ ! -e $W/stop ]; do
  echo AAAA >$W/stage/a; mv -T $W/stage/a $ctx/f
  echo BBBB >$W/stage/b; mv -T $W/stage/b $ctx/f
done" &
FLIP=$!
for i in $(seq 1 10); do "$SBX" image build --no-cache -f $T/Sbxfile2 $ctx >/dev/null 2>&1 </dev/null; done
stop_flip
for c in AAAA BBBB; do
  as $ATK sh -c "echo $c >$ctx/f"
  run "cache: the build of $c" 0 "$SBX" image build -t cached:$c -f $T/Sbxfile2 $ctx
  run "  its image" 0 "$SBX" run --image cached:$c -- cat /x
  check "  holds $c (the image under the key of $c's bytes)" [ "$OUT" = $c ]
done

# --- 3. the build context's own path ---
# A link the attacker owns, in the attacker's directory, naming root's directory.
mkdir -p $T/rootctx && echo "$SECRET" >$T/rootctx/f && chmod 600 $T/rootctx/f
as $ATK ln -sfn $T/rootctx $W/ctxlink
printf 'FROM bb\nCOPY f /x\n' >$T/Sbxfile3
run "context: a link of another user's on the context's path is refused" 2 "$SBX" image build -f $T/Sbxfile3 $W/ctxlink
check "  the message names it, its directory and its owner ($ERR)" has "$ERR" "$W/ctxlink is a symbolic link"
check "  ... and the owner" has "$ERR" "belongs to uid $AUID ($ATK)"
check "  the secret is in no image" no_secret_in_store
# Root's own link, in root's own directory, is followed as before.
ln -sfn $T/ctx-real $T/ctxlink && mkdir -p $T/ctx-real && echo mine >$T/ctx-real/f
run "context: root's own link is followed" 0 "$SBX" image build -t own:1 -f $T/Sbxfile3 $T/ctxlink

# --- 4. a volume's source through a directory of another user's ---
# root's directory the attacker aims at (it holds data/, as the attacker's does)
VICT=$T/victim
mkdir -p $VICT/data && echo "$SECRET" >$VICT/data/id
as $ATK sh -c "set -e; mkdir -p $W/v/real/data; echo attacker >$W/v/real/data/id; ln -sfn $VICT $W/v/p"
run "volume: a link of another user's on the source's path is refused" 125 "$SBX" run --image bb -v $W/v/p/data:/m -- cat /m/id
check "  the message names the link, its directory and its owner ($ERR)" has "$ERR" "$W/v/p is a symbolic link (to $VICT) in $W/v, which belongs to uid $AUID ($ATK)"
check "  ... and says what to do" has "$ERR" "Name the path it leads to"
check "  nothing of root's directory reached the box" bash -c "! grep -qF '$SECRET' '$T/out'"
run "volume: the other user's own directory mounts" 0 "$SBX" run --image bb -v $W/v/real/data:/m -- cat /m/id
check "  output" [ "$OUT" = attacker ]
ln -sfn $VICT $T/vlink
run "volume: root's own link in root's directory is followed" 0 "$SBX" run --image bb -v $T/vlink/data:/m -- cat /m/id
check "  output" [ "$OUT" = "$SECRET" ]
# The race: `q` flips between a real directory and a link to root's while
# root creates boxes that write into q/data. Root's directory is never written.
as $ATK sh -c "mkdir -p $W/v/q/data; ln -sfn $VICT $W/stage/ql"
as $ATK nice -n 10 sh -c "while [ ! -e $W/stop ]; do
  mv -T $W/v/q $W/stage/qd; mv -T $W/stage/ql $W/v/q
  mv -T $W/v/q $W/stage/ql; mv -T $W/stage/qd $W/v/q
done" &
FLIP=$!
mounted=0 other=""
for i in $(seq 1 30); do
  "$SBX" run --image bb -v $W/v/q/data:/m -- sh -c 'touch /m/written-by-box' >"$T/v.out" 2>"$T/v.err" </dev/null
  rc=$?
  if [ $rc = 0 ]; then
    mounted=$((mounted + 1))
  elif ! grep -qE "symbolic link|does not exist|No such file|is no longer" "$T/v.err"; then
    other="$other [rc $rc: $(head -c 300 "$T/v.err")]"
  fi
done
stop_flip
# (A box is made only when both the provider's check and the shim's walk found
# the real directory: how many is the race's business, not asserted.)
check "volume race: $mounted boxes made, every other create refused${other:+:$other}" [ -z "$other" ]
check "volume race: root's directory was never mounted in a box" [ ! -e $VICT/data/written-by-box ]
# --- 5. downloads (`sbx cp BOX:...`) into a directory of another user's ---
# root's directory the attacker aims at: nothing may ever be written in it.
VD=$T/victim-dl
mkdir -p $VD
run "download: a box to copy from" 0 "$SBX" create --image bb
dbox=$OUT
run "  its file and directory" 0 "$SBX" exec $dbox -- sh -c 'echo boxdata >/f; mkdir /d; echo boxd >/d/g'
as $ATK sh -c "set -e; mkdir -p $W/dl/real; ln -sfn $VD $W/dl/p"
run "download: a file through a link of another user's is refused" 1 "$SBX" cp $dbox:/f $W/dl/p/f
check "  the message names the link, its directory and its owner ($ERR)" has "$ERR" "$W/dl/p is a symbolic link (to $VD) in $W/dl, which belongs to uid $AUID ($ATK)"
run "download: a directory through it is refused" 1 "$SBX" cp $dbox:/d $W/dl/p/d
check "  the message names the link ($ERR)" has "$ERR" "$W/dl/p is a symbolic link"
run "download: a new directory beneath it is refused" 1 "$SBX" cp $dbox:/f $W/dl/p/new/f
check "  root's directory is untouched" [ -z "$(ls -A $VD)" ]
run "download: into the other user's own directory" 0 "$SBX" cp $dbox:/f $W/dl/real/f
check "  the file is there" [ "$(cat $W/dl/real/f)" = boxdata ]
run "download: a directory into it" 0 "$SBX" cp $dbox:/d $W/dl/real/d
check "  the directory is there" [ "$(cat $W/dl/real/d/g)" = boxd ]
ln -sfn $T/dl-own $T/dllink && mkdir -p $T/dl-own
run "download: root's own link in root's directory is followed" 0 "$SBX" cp $dbox:/f $T/dllink/f
check "  the file is there" [ "$(cat $T/dl-own/f)" = boxdata ]
# The race: `q` is, in turn, a link to root's directory and a fresh directory
# of the attacker's (and sometimes missing, when root makes it) while root
# downloads a file, a directory and a file under a new directory into it,
# through the agent and through the box's own tar (SBX_CP_BOX_TAR=1). Every
# rename stays in one directory, so the attacker can move away what root made.
as $ATK sh -c "mkdir -p $W/dl/q"
as $ATK nice -n 10 sh -c "n=0; while [ ! -e $W/stop ]; do n=\$((n + 1))
  mkdir $W/dl/.d\$n; mv -T $W/dl/q $W/dl/.o\$n 2>/dev/null
  ln -sfn $VD $W/dl/.l\$n; mv -T $W/dl/.l\$n $W/dl/q 2>/dev/null
  mv -T $W/dl/q $W/dl/.l\$n 2>/dev/null; mv -T $W/dl/.d\$n $W/dl/q 2>/dev/null
done" &
FLIP=$!
copied=0 other=""
for i in $(seq 1 30); do
  for how in "" 1; do
    for what in "$dbox:/f $W/dl/q/f" "$dbox:/d $W/dl/q/d$i" "$dbox:/f $W/dl/q/n$i/f"; do
      SBX_CP_BOX_TAR=$how "$SBX" cp $what >"$T/d.out" 2>"$T/d.err" </dev/null
      rc=$?
      if [ $rc = 0 ]; then
        copied=$((copied + 1))
      elif ! grep -qE "symbolic link|does not exist|No such file|Not a directory|not a directory" "$T/d.err"; then
        other="$other [rc $rc: $(head -c 300 "$T/d.err")]"
      fi
    done
  done
done
stop_flip
check "download race: $copied copies made, every other refused${other:+:$other}" [ -z "$other" ]
check "download race: root's directory was never written ($(ls -A $VD | head -5 | tr '\n' ' '))" [ -z "$(ls -A $VD)" ]
run "download: the box goes" 0 "$SBX" stop $dbox
census "end of the races"
finish
