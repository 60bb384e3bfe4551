# Sourced by tests/acceptance/test_*.sh: a TAP harness for end-to-end checks
# through the sbx CLI and the Python binding, with a private state directory
# and a leak census at the end.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
SBX="$B/sbx"
# The valgrind pass checks the CLI itself: every "$SBX" runs under memcheck
# (a script that needs the real process, e.g. to signal it by its exe, sets
# SBX_NO_VALGRIND_CLI=1 before sourcing this file).
if [ -n "${SBX_VALGRIND:-}" ] && [ -z "${SBX_NO_VALGRIND_CLI:-}" ]; then
  export SBX_REAL="$SBX"
  SBX="$ROOT/tests/valgrind-sbx.sh"
fi
PY=${PYTHON:-/usr/bin/python3}
# A sanitizer build of libsbx loads into python only with its runtime
# preloaded (as tests/run.sh does): `py` runs python so. SANITIZED says
# whether sbx runs instrumented (ASan, or memcheck in the valgrind pass), for
# the few checks of memory use whose bound only holds for a plain build.
preload=""
for rt in asan ubsan; do
  ldd "$B/libsbx.so" 2>/dev/null | grep -q "lib$rt" && preload="$preload $("${CC:-cc}" -print-file-name=lib$rt.so)"
done
preload=${preload# }
py() { LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" "$PY" "$@"; }
SANITIZED=
if [ -n "$preload" ] || [ -n "${SBX_VALGRIND:-}" ]; then SANITIZED=1; fi
# A sanitizer build's agent is dynamically linked and cannot run in image
# boxes: use the plain build's static one, as tests/integration/test_linux.c does.
if [ -z "${SBX_AGENT:-}" ] && [ -x "$ROOT/build/sbx-agent" ] && ! file -L "$B/sbx-agent" 2>/dev/null | grep -q static; then
  export SBX_AGENT="$ROOT/build/sbx-agent"
fi
T=$(mktemp -d /tmp/sbx-acc.XXXXXX)
# Box paths the tests use (workdirs, startup files, the examples'): they belong
# inside boxes, so one on the host is a leak (a `local` box makes an absolute
# workdir on the host, and nothing removes it). One that existed before this
# script started is not its own.
HOST_PATHS="/tmp/work /work /work2 /w /sandbox /workspace /tmp/w /tmp/sbx-first-run"
host_before=" "
for _hp in $HOST_PATHS; do if [ -e "$_hp" ] || [ -L "$_hp" ]; then host_before="$host_before$_hp "; fi; done
export SBX_STATE_DIR="$T/state" TMPDIR="$T/tmp"
mkdir -p "$TMPDIR" "$T/host"
n=0 failed=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip_all() {
  rm -rf "$T"
  if [ "${SBX_MUST_WORK:-}" = 1 ]; then echo "not ok 1 - skipped under SBX_MUST_WORK=1: $1"; echo "1..1"; exit 1; fi
  echo "1..0 # SKIP $1"; exit 0
}

# run NAME EXPECTED_RC CMD...: runs CMD, output in $OUT / $ERR, checks its exit code.
run() {
  local name=$1 want=$2; shift 2
  "$@" >"$T/out" 2>"$T/err" </dev/null
  RC=$?
  OUT=$(cat "$T/out"); ERR=$(cat "$T/err")
  if [ "$RC" = "$want" ]; then ok "$name"; else not_ok "$name" "exit $RC, wanted $want" "stderr: ${ERR:0:400}"; fi
}
# check NAME CONDITION...: a test on its own.
check() { local name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name" "failed: $*"; fi; }
has() { case "$1" in *"$2"*) return 0 ;; *) return 1 ;; esac; }

# kill_mid_run SIG WHAT UP CMD...: runs CMD in the background (INT and TERM at
# their defaults, output in $T/out and $T/err) until the command UP succeeds,
# then sends it SIG and reaps it. A CMD that ends first is a failure, "the
# bench made WHAT", and returns 1.
kill_mid_run() {
  local sig=$1 what=$2 up=$3 p; shift 3
  env --default-signal=INT,TERM "$@" >"$T/out" 2>"$T/err" </dev/null & p=$!
  while kill -0 $p 2>/dev/null; do
    "$up" && { kill -"$sig" $p; wait $p 2>/dev/null; return 0; }
    sleep 0.2
  done
  wait $p
  not_ok "SIG$sig: the bench made $what" "$(head -c 400 "$T/err")"
  return 1
}

# Everything a box can leave behind on the host, for boxes of this state dir.
leaks() {
  local l=""
  [ -n "$(ls -A "$SBX_STATE_DIR/linux/boxes" 2>/dev/null)" ] && l="$l box-dirs:$(ls "$SBX_STATE_DIR/linux/boxes" | tr '\n' ' ')"
  [ -n "$(ls -A "$SBX_STATE_DIR/boxes" 2>/dev/null)" ] && l="$l records:$(ls "$SBX_STATE_DIR/boxes" | tr '\n' ' ')"
  [ -n "$(ls -A "$SBX_STATE_DIR/local" 2>/dev/null)" ] && l="$l local-records:$(ls "$SBX_STATE_DIR/local" | tr '\n' ' ')"
  # Box paths on the host: tests/run.sh, which runs several scripts at once,
  # checks those once for the whole run (SBX_RUN_HOST_CENSUS=1).
  local h; [ -n "${SBX_RUN_HOST_CENSUS:-}" ] || for h in $HOST_PATHS; do
    case "$host_before" in *" $h "*) continue ;; esac
    if [ -e "$h" ] || [ -L "$h" ]; then l="$l host-path:$h"; fi
  done
  local p; for p in /proc/[0-9]*; do
    local c; c=$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
    case "$c" in *sbx-shim*"$T"*|*sbx-agent*"$T"*) l="$l process:${p#/proc/}:$c" ;; esac
  done
  grep -q "$T" /proc/self/mountinfo && l="$l mount:$(grep "$T" /proc/self/mountinfo | head -1)"
  # Box cgroups under this script's level (SBX_LINUX_CGROUP, which tests/run.sh
  # sets for each test; else sbx/, where other processes' boxes may be
  # starting, an empty group for a moment): census() retries, so only a group
  # that stays empty is reported.
  local lvl=${SBX_LINUX_CGROUP:-sbx}
  local g; for g in /sys/fs/cgroup/"$lvl"/sbx-* /sys/fs/cgroup/*/"$lvl"/sbx-*; do
    [ -d "$g" ] || continue
    [ -n "$(cat "$g/cgroup.procs" 2>/dev/null)" ] || l="$l empty-cgroup:$g"
  done
  [ -n "$(ls -A "$TMPDIR" 2>/dev/null)" ] && l="$l tmp:$(ls "$TMPDIR" | tr '\n' ' ')"
  echo "$l"
}
# census NAME: no leak (the kernel frees a cgroup a moment after its last task: look a few times).
census() {
  local l i
  for i in $(seq 1 50); do l=$(leaks); [ -z "$l" ] && break; sleep 0.1; done
  if [ -z "$l" ]; then ok "census: nothing left ($1)"; else not_ok "census: nothing left ($1)" "$l"; fi
}
finish() {
  census "end"
  # Whatever a failed test left: stop it so the next run starts clean.
  local id; for id in $(ls "$SBX_STATE_DIR/boxes" 2>/dev/null | sed 's/\.json$//'); do "$SBX" stop --force "$id" >/dev/null 2>&1; done
  "$SBX" gc >/dev/null 2>&1
  echo "1..$n"
  rm -rf "$T"
  [ "$failed" -eq 0 ]
}
need_root() { [ "$(id -u)" = 0 ] || skip_all "the linux provider needs root"; [ -x "$SBX" ] || skip_all "$SBX not built"; }
