#!/usr/bin/env bash
# The host client against a hostile box, through the CLI (issue #8): what a
# box hands back to `sbx cp` (setuid files, device nodes, archives that try
# to write outside the destination), an agent that stops answering, a
# command that exits 124, flooding output, streamed stdin, and temporaries
# a `kill -9` leaves behind. Each checks the host: modes, owners, canary
# files, leftover temporaries. Nothing here asserts how long anything takes.
. "$(dirname "$0")/lib.sh"
need_root
# These attacks come through the box's own tar: `sbx cp` of a directory
# takes that path only for providers without the agent's tar built-ins
# (docs/transfer.md), so it is forced here to keep its defences tested.
export SBX_CP_BOX_TAR=1
export SBX_LIB="$B/libsbx.so" PYTHONPATH="$ROOT/python"
H="$T/host"
CANARY="$T/canary"
mkdir -p "$CANARY"
echo secret >"$CANARY/victim"
chmod 600 "$CANARY/victim"
DFL="env --default-signal=INT,TERM,HUP"

id=$("$SBX" create -e PATH=/hostile:/usr/local/bin:/usr/bin:/bin) || skip_all "cannot create a box"

# --- exit 124 and output caps ------------------------------------------------
run "a command's own exit 124 is its status" 124 "$SBX" exec "$id" -- sh -c 'echo mine >&2; exit 124'
check "exit 124: its stderr is kept, no 'timed out' ($ERR)" [ "$ERR" = mine ]
run "--timeout 1 on sleep 30: exit 124" 124 "$SBX" exec --timeout 1 "$id" -- sleep 30
check "a real timeout says so ($ERR)" has "$ERR" "timed out after 1s"

"$SBX" exec "$id" -- head -c 20000000 /dev/zero >"$T/out" 2>"$T/err" </dev/null
check "default output cap: 16 MiB kept of 20 MB ($(stat -c %s "$T/out"))" [ "$(stat -c %s "$T/out")" = 16777216 ]
check "the CLI says the output was truncated" grep -q "truncated" "$T/err"
"$SBX" exec --output-limit 20000000 "$id" -- head -c 20000000 /dev/zero >"$T/out" 2>"$T/err" </dev/null
check "--output-limit raises it ($(stat -c %s "$T/out"))" [ "$(stat -c %s "$T/out")" = 20000000 ]
# --json of a 16 MiB result (every byte a 6-byte escape) is written as a stream:
# it took 259 MB when built whole first (issue 24). Under memcheck the RSS is
# valgrind's own, and escaping 16 MiB took 53 s of CPU: it escapes 1 MiB
# (the same code, capped by --output-limit); the plain and ASan runs check
# the bound with the default cap.
if [ -z "${SBX_VALGRIND:-}" ]; then
  /usr/bin/time -f %M -o "$T/rss" "$SBX" exec --json "$id" -- head -c 20000000 /dev/zero >"$T/out" 2>"$T/err" </dev/null
  check "--json of 16 MiB of NULs: 96 MiB of escapes ($(stat -c %s "$T/out") bytes)" [ "$(stat -c %s "$T/out")" -gt 100663296 ]
else
  "$SBX" exec --json --output-limit 1048576 "$id" -- head -c 2000000 /dev/zero >"$T/out" 2>"$T/err" </dev/null
  check "--json of 1 MiB of NULs: 6 MiB of escapes ($(stat -c %s "$T/out") bytes)" [ "$(stat -c %s "$T/out")" -gt 6291456 ]
fi
if [ -z "${SBX_VALGRIND:-}" ]; then
  bound=102400; [ -n "$SANITIZED" ] && bound=262144
  check "--json of 16 MiB: peak RSS under $((bound / 1024)) MiB ($(tail -1 "$T/rss") KiB)" [ "$(tail -1 "$T/rss")" -lt "$bound" ]
fi
out=$(py - "$id" <<'EOF'
import dataclasses, sys
from sbx import Sandbox, SandboxSpec, SandboxExecResult
with Sandbox({"linux": {}}, SandboxSpec()) as box:
    box.start()
    big = box.exec("head -c 20000000 /dev/zero", timeout_s=60)
    small = box.exec("echo hi", timeout_s=60)
print(len(big.stdout), big.truncated, small.truncated,
      [f.name for f in dataclasses.fields(SandboxExecResult)])
EOF
)
check "Python: .truncated on a capped result, not on a small one; the reference's four fields ($out)" \
  [ "$out" = "16777216 True False ['stdout', 'stderr', 'return_code', 'error_type']" ]

# --- cp of a directory: setuid, owners --------------------------------------
"$SBX" exec "$id" -- sh -c 'mkdir -p /d/sub && cp /bin/true /d/suid && chmod 4755 /d/suid &&
  cp /bin/true /d/sgid && chmod 2755 /d/sgid && echo x >/d/sub/owned && chown 1234:1234 /d/sub/owned &&
  chmod 1777 /d/sub' >/dev/null 2>&1
run "cp BOX:/d (setuid inside)" 0 "$SBX" cp "$id:/d" "$H/d"
check "setuid dropped on the way out ($(stat -c %a "$H/d/suid"))" [ "$(stat -c %a "$H/d/suid")" = 755 ]
check "setgid dropped on the way out ($(stat -c %a "$H/d/sgid"))" [ "$(stat -c %a "$H/d/sgid")" = 755 ]
check "files are the caller's by default ($(stat -c %u:%g "$H/d/sub/owned"))" [ "$(stat -c %u:%g "$H/d/sub/owned")" = "$(id -u):$(id -g)" ]
check "a sticky directory stays sticky ($(stat -c %a "$H/d/sub"))" [ "$(stat -c %a "$H/d/sub")" = 1777 ]
run "cp -a BOX:/d" 0 "$SBX" cp -a "$id:/d" "$H/da"
check "-a keeps numeric owners ($(stat -c %u:%g "$H/da/sub/owned"))" [ "$(stat -c %u:%g "$H/da/sub/owned")" = 1234:1234 ]
check "-a still drops setuid ($(stat -c %a "$H/da/suid"))" [ "$(stat -c %a "$H/da/suid")" = 755 ]

# --- cp of a directory: hostile archives --------------------------------------
# The box's own `tar` is the box's: here a script that hands back a crafted archive.
py - "$T/payloads" "$CANARY" <<'EOF'
import io, os, sys, tarfile
out, canary = sys.argv[1], sys.argv[2]
os.makedirs(out)
def tar(name, members):
    with tarfile.open(os.path.join(out, name + ".tar"), "w", format=tarfile.PAX_FORMAT) as t:
        for m, data in members:
            t.addfile(m, io.BytesIO(data) if data is not None else None)
def reg(name, mode=0o644, data=b"x\n", uid=0):
    m = tarfile.TarInfo(name); m.mode = mode; m.size = len(data); m.uid = m.gid = uid
    return (m, data)
def special(name, kind, **kw):
    m = tarfile.TarInfo(name); m.type = kind; m.mode = 0o666
    for k, v in kw.items(): setattr(m, k, v)
    return (m, None)
tar("devs", [reg("./ok"), special("./mem", tarfile.CHRTYPE, devmajor=1, devminor=1),
             special("./null", tarfile.CHRTYPE, devmajor=1, devminor=3),
             special("./blk", tarfile.BLKTYPE, devmajor=7, devminor=0),
             special("./fifo", tarfile.FIFOTYPE), reg("./after")])
tar("symlink", [special("./esc", tarfile.SYMTYPE, linkname=canary), reg("./esc/planted")])
tar("dotdot", [reg("../dotdot-planted")])
tar("absolute", [reg(canary + "/abs-planted")])
tar("hardlink", [special("./esc", tarfile.SYMTYPE, linkname=canary),
                 special("./hl", tarfile.LNKTYPE, linkname="esc/victim", mode=0o4777)])
tar("hardabs", [special("./hl", tarfile.LNKTYPE, linkname=canary + "/victim", mode=0o4777)])
EOF
printf '#!/bin/sh\n# tar -cf FILE -C SRC .\ncat "/hostile/$(basename "$4").tar" >"$2"\n' >"$T/faketar"
chmod 755 "$T/faketar"
"$SBX" cp "$T/faketar" "$id:/hostile/tar" >/dev/null
for p in devs symlink dotdot absolute hardlink hardabs; do
  "$SBX" cp "$T/payloads/$p.tar" "$id:/hostile/$p.tar" >/dev/null
  "$SBX" exec "$id" -- mkdir -p "/$p" >/dev/null
done
"$SBX" exec "$id" -- sh -c 'command -v tar' >"$T/out" 2>&1
check "the box's tar is the hostile one ($(cat "$T/out"))" [ "$(cat "$T/out")" = /hostile/tar ]

run "cp of an archive with device nodes and a FIFO" 0 "$SBX" cp "$id:/devs" "$H/devs"
check "device nodes and FIFOs are not created on the host ($(ls "$H/devs" | tr '\n' ' '))" \
  [ "$(ls "$H/devs" | tr '\n' ' ')" = "after ok " ]
check "each skipped entry is named on stderr" has "$ERR" "skipping './mem'"
run "cp of an archive writing through a symlink it planted: refused" 1 "$SBX" cp "$id:/symlink" "$H/sl"
check "nothing written through the symlink" [ ! -e "$CANARY/planted" ]
run "cp of an archive with ../: refused" 1 "$SBX" cp "$id:/dotdot" "$H/dd/x"
check "nothing written above the destination" [ ! -e "$H/dd/dotdot-planted" ]
run "cp of an archive with an absolute path: refused" 1 "$SBX" cp "$id:/absolute" "$H/abs"
check "nothing written at the absolute path" [ ! -e "$CANARY/abs-planted" ]
run "cp of an archive hard-linking through a planted symlink: refused" 1 "$SBX" cp "$id:/hardlink" "$H/hl"
run "cp of an archive hard-linking an absolute host path: refused" 1 "$SBX" cp "$id:/hardabs" "$H/ha"
check "the host file was not linked nor chmodded ($(stat -c '%h %a' "$CANARY/victim"))" \
  [ "$(stat -c '%h %a' "$CANARY/victim")" = "1 600" ]
check "canary dir holds only its victim ($(ls "$CANARY" | tr '\n' ' '))" [ "$(ls "$CANARY")" = victim ]

# --- temporaries left by kill -9 ------------------------------------------------
# A download stopped by SIGKILL leaves nothing in the destination: its temp is
# an unnamed file (O_TMPFILE) until the end. Before, it left ".f.sbx-<pid>-XXXXXX"
# (714 MB in the attack), removed only by a later download to the same name.
# The file is big enough that the kill lands mid-download: 300 MB, or 64 MB with
# the CLI under memcheck (twenty times slower: it is still mid-way).
BIG=300000000; [ -n "${SBX_VALGRIND:-}" ] && BIG=64000000
"$SBX" exec "$id" -- sh -c "head -c $BIG /dev/urandom >/big; echo small >/small" >/dev/null
mkdir -p "$H/dl"
"$SBX" cp "$id:/big" "$H/dl/f" >/dev/null 2>&1 & p=$!
# Killed once it holds its temp file open (an unnamed one shows as "#N (deleted)").
until ls -l "/proc/$p/fd" 2>/dev/null | grep -q "$H/dl/" || ls -A "$H/dl" | grep -q . ||
      ! kill -0 $p 2>/dev/null; do sleep 0.01; done
kill -9 $p; wait $p 2>/dev/null
check "SIGKILL mid-download left nothing in the destination ($(ls -A "$H/dl" | tr '\n' ' '))" \
  [ -z "$(ls -A "$H/dl")" ]
# Where the filesystem has no O_TMPFILE a named temp is used: a dead process's is
# removed by the next download to the same name (another user's or a live one's is not).
sleep 30 & live=$!
( exit 0 ) & dead=$!; wait $dead
touch "$H/dl/.f.sbx-$dead-abcdef" "$H/dl/.f.sbx-$live-abcdef"
run "the next download to the same name" 0 "$SBX" cp "$id:/small" "$H/dl/f"
check "it removed the dead process's temp, kept the live one's ($(ls -A "$H/dl" | tr '\n' ' '))" \
  [ "$(ls -A "$H/dl" | tr '\n' ' ')" = ".f.sbx-$live-abcdef f " ]
kill $live 2>/dev/null; wait $live 2>/dev/null
rm -f "$H/dl/.f.sbx-$live-abcdef"

# A directory download stopped by SIGKILL leaves a temp in the box and in TMPDIR.
"$SBX" exec "$id" -- sh -c "mkdir -p /bigdir && head -c $BIG /dev/urandom >/bigdir/x" >/dev/null
# (the box's tar is the script above: it serves /hostile/bigdir.tar)
"$SBX" exec "$id" -- sh -c 'cp /bigdir/x /hostile/bigdir.tar' >/dev/null
"$SBX" cp "$id:/bigdir" "$H/bd" >/dev/null 2>&1 & p=$!
until ls "$TMPDIR" | grep -q "sbx-cp" || ! kill -0 $p 2>/dev/null; do sleep 0.01; done
kill -9 $p; wait $p 2>/dev/null
check "precondition: a local temp of the killed cp ($(ls -A "$TMPDIR" | tr '\n' ' '))" has "$(ls -A "$TMPDIR")" "sbx-cp"
"$SBX" exec "$id" -- sh -c 'ls /tmp' >"$T/out" 2>&1
check "precondition: a box temp of the killed cp ($(tr '\n' ' ' <"$T/out"))" grep -q "sbx-cp" "$T/out"
run "the next directory download" 0 "$SBX" cp "$id:/devs" "$H/devs2"
check "it removed the local temps ($(ls -A "$TMPDIR" | tr '\n' ' '))" [ -z "$(ls -A "$TMPDIR")" ]
"$SBX" exec "$id" -- sh -c 'ls /tmp' >"$T/out" 2>&1
check "it removed the box temp ($(tr '\n' ' ' <"$T/out"))" [ -z "$(grep "sbx-cp\." "$T/out")" ]

# --- an agent that stops answering ------------------------------------------------
# `sleep 98.NNN` marks the command; its ancestor sbx-agent is this box's agent.
agent_of() { # marker -> pid of the sbx-agent above the process running it
  # pgrep: one pass over /proc in C (a shell loop over it took seconds on a
  # loaded machine, past the command's timeout, and never found it).
  local pid
  pid=$(pgrep -xf "sleep $1" | head -1)
  while [ -n "$pid" ] && [ "$pid" != 1 ]; do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sbx-agent ] && { echo "$pid"; return; }
    pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  done
}
wedge() { # marker, the sbx pid: waits for the command, then stops its agent; prints its pid
  local a=""
  while [ -z "$a" ] && kill -0 "$2" 2>/dev/null; do a=$(agent_of "$1"); done
  [ -n "$a" ] && kill -STOP "$a"; echo "$a"
}
# A watchdog bounds a run that would hang (the bug): it is not a timing assertion.
watchdog() { ( sleep 120; kill -9 "$1" ) >/dev/null 2>&1 & W=$!; }
m=98.$$1
# The timeout must outlast the command's start (a loaded machine, ASan) so the
# agent is silenced before it expires: 2 s did not when tests ran side by side.
$DFL "$SBX" exec --timeout 20 "$id" -- sleep $m >"$T/out" 2>"$T/err" </dev/null & p=$!
watchdog $p
a=$(wedge $m $p); wait $p; rc=$?; [ -z "$a" ] || kill -CONT "$a"; kill $W
check "the command ran before the timeout, and its agent was silenced" [ -n "$a" ]
check "a silent agent: exec --timeout 20 still ends as a timeout (exit $rc: $(head -c 300 "$T/err"))" [ $rc = 124 ]
for sig in TERM INT; do
  m=98.$$$([ $sig = TERM ] && echo 2 || echo 3)
  $DFL "$SBX" exec --timeout 0 "$id" -- sleep $m >"$T/out" 2>"$T/err" </dev/null & p=$!
  watchdog $p
  a=$(wedge $m $p); kill -$sig $p; wait $p; rc=$?; [ -z "$a" ] || kill -CONT "$a"; kill $W
  check "SIG$sig: the command ran, and its agent was silenced" [ -n "$a" ]
  want=$([ $sig = TERM ] && echo 143 || echo 130)
  check "a silent agent: SIG$sig ends exec (exit $rc, want $want: $(head -c 300 "$T/err"))" [ $rc = "$want" ]
done

# --- stdin is streamed ------------------------------------------------------------
# A command that ignores stdin starts and ends while the feeder is still
# writing: asserted by order (the feeder is still there when sbx is done).
mkfifo "$T/fifo"
( echo early; exec sleep 60 ) >"$T/fifo" & feeder=$!
"$SBX" exec "$id" -- echo ran <"$T/fifo" >"$T/out" 2>"$T/err"; rc=$?
kill -0 $feeder 2>/dev/null && alive=yes || alive=no
kill $feeder 2>/dev/null; wait $feeder 2>/dev/null
check "exec with a slow stdin feeder: exit 0, ran ($rc, $(cat "$T/out"))" [ "$rc $(cat "$T/out")" = "0 ran" ]
check "exec with a slow stdin feeder: ended before the feeder did ($alive)" [ $alive = yes ]
# Streamed through: a command reading its stdin sees it all, in bounded memory.
# Under memcheck the RSS is valgrind's own heap, so the bound is checked by the
# plain and ASan runs; memcheck checks the streaming path with 64 MiB.
MIB=512; [ -n "${SBX_VALGRIND:-}" ] && MIB=64
head -c $((MIB << 20)) /dev/zero | /usr/bin/time -f %M -o "$T/rss" "$SBX" exec "$id" -- wc -c >"$T/out" 2>"$T/err"
rc=${PIPESTATUS[1]}; peak=$(tail -1 "$T/rss")
check "$MIB MiB of stdin through wc -c: all counted ($rc, $(tr -d ' ' <"$T/out"))" [ "$rc $(tr -d ' ' <"$T/out")" = "0 $((MIB << 20))" ]
# 64 MiB for the plain build; under ASan (its shadow) the bound is 256 MiB:
# still far below the ~1 GiB of reading it whole.
bound=65536; [ -n "$SANITIZED" ] && bound=262144
if [ -z "${SBX_VALGRIND:-}" ]; then
  check "512 MiB of stdin: sbx's peak RSS stayed under $((bound / 1024)) MiB (${peak} KiB)" [ "$peak" -lt "$bound" ]
fi

"$SBX" stop "$id" >/dev/null
finish
