#!/usr/bin/env bash
# Runs every test binary (TAP), the test scripts, the fuzz corpus replays and
# the Python tests, several at a time, and ends with one line:
# "N passed, N failed, N skipped".
#
# Most tests spend their time waiting on boxes, so SBX_JOBS of them (cores + 2
# by default) run at once. Each prints nothing until it ends; then its output
# is printed whole, so two tests' lines never interleave. What each test makes
# is its own: a private state directory (the C harness's temp directory,
# tests/acceptance/lib.sh's), and its own cgroup level (SBX_LINUX_CGROUP), so
# its leak census (tests/linux_census.h, lib.sh's census) counts only its own
# boxes. What no test can tell apart from another's (box paths such as /w
# made on the host, a box's network interface left in the host's namespace)
# is checked here, once for the whole run ("host census").
#
# A test that cannot share the host (one that loads it on purpose, counts
# host-wide, or is CPU bound) says so with a line SBX_TEST_SERIAL="why" (a
# string in a C test binary, a line in a script): it runs alone, after the
# others. A C binary whose scale cases alone need that names them:
# SBX_TEST_SERIAL_CASES="case,..." (TAP_FILTER substrings). A long binary may
# be split in parts run at once: SBX_TEST_PARTS="case,...;case,...".
set -u
B=${B:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
# SBX_TESTS_DIR: where the tests' sources are (tests/unit/test_runner.sh points
# it at a fixture directory); SBX_PYTHON_TESTS the pytest directory.
TESTS=${SBX_TESTS_DIR:-tests}
PYTESTS=${SBX_PYTHON_TESTS:-python/tests}
cd "$(dirname "$0")/.."
JOBS=${SBX_JOBS:-$(($(nproc 2>/dev/null || echo 2) + 2))}
# A job still running after SBX_JOB_TIMEOUT s has hung (the C tests' own
# alarms catch their hangs; a script's loop may not): it is killed and fails,
# so CI ends with a report instead of at its own limit. Not a measure of speed.
JOB_TIMEOUT=${SBX_JOB_TIMEOUT:-2400}
# The test doubles `fake` and `fake_basic` are not in libsbx: the C binaries link
# them, and what runs the CLI or Python (the scripts, the Python tests) loads
# them as a plugin.
FAKES="${SBX_PLUGIN_PATH:+$SBX_PLUGIN_PATH:}$PWD/$B/tests/fakes/sbx-fake.so"
passed=0 failed=0 skipped=0
failed_names=()
W=$(mktemp -d /tmp/sbx-run.XXXXXX)
# What each failing test printed, printed again at the end: CI keeps only the
# tail of a long log, and the failure must be in it.
failures="$W/failures"; : >"$failures"
running=() # pids of the jobs running now
cleanup() {
  local p
  for p in "${running[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

count() { # name, output file
  local p f s whole=0
  # p counts every "ok" line, skips included; s the skips among them.
  p=$(grep -cE '^ok [0-9]+ ' "$2" | head -1); s=$(grep -cE '^ok [0-9]+ .*# SKIP' "$2" | head -1)
  f=$(grep -cE '^not ok ' "$2" | head -1)
  # A whole file skipped ("1..0 # SKIP why") counts as one skip, not as nothing.
  if grep -qE '^1\.\.0 *# *SKIP' "$2"; then whole=1; fi
  p=$((p - s)); s=$((s + whole))
  # Under SBX_MUST_WORK=1 a skip is a failure, whoever printed it (a script's inline
  # "ok N - x # SKIP" too): a machine that cannot run a test must not pass it.
  if [ "${SBX_MUST_WORK:-}" = 1 ] && [ "$s" != 0 ]; then
    grep -E '^ok [0-9]+ .*# SKIP|^1\.\.0 *# *SKIP' "$2" | sed 's/^/   skipped under SBX_MUST_WORK=1: /'
    f=$((f + s)); s=0
  fi
  passed=$((passed + p)); skipped=$((skipped + s)); failed=$((failed + f))
  if [ "$f" != 0 ]; then failed_names+=("$1"); fi
}

# pytest's summary line: passed, failed (and errors), skipped.
count_python() { # output file, exit code
  local line p f e s
  line=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$1" | tail -1)
  p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 0)
  e=$(echo "$line" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+' || echo 0)
  s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || echo 0)
  p=${p:-0} f=${f:-0} e=${e:-0} s=${s:-0}
  # conftest.py fails a skip under SBX_MUST_WORK=1; this catches one it missed.
  if [ "${SBX_MUST_WORK:-}" = 1 ] && [ "$s" != 0 ]; then
    echo "   $s skipped under SBX_MUST_WORK=1"; f=$((f + s)); s=0
  fi
  passed=$((passed + p)); failed=$((failed + f + e)); skipped=$((skipped + s))
  if [ "$2" -ne 0 ] && [ $((f + e)) = 0 ]; then failed=$((failed + 1)); fi
  if [ "$2" -ne 0 ] || [ $((f + e)) != 0 ]; then failed_names+=("python"); fi
}

# The jobs: J_NAME[i], J_KIND[i] (tap, python, vgacc: an acceptance script with
# sbx under memcheck), J_SERIAL[i] (why it runs alone, or empty), its command in
# $W/i.cmd.
J_NAME=() J_KIND=() J_SERIAL=()
add_job() { # name kind serial-why command...
  local i=${#J_NAME[@]}
  J_NAME+=("$1"); J_KIND+=("$2"); J_SERIAL+=("$3"); shift 3
  printf '%q ' "$@" >"$W/$i.cmd"
}
# A test's own SBX_TEST_SERIAL="why" (a line of a script, a string in a binary).
serial_why() { grep -ao 'SBX_TEST_SERIAL="[^"]*"' "$1" 2>/dev/null | head -1 | cut -d'"' -f2; }

# A C test binary, under memcheck in the valgrind pass.
vg() {
  if [ -n "${SBX_VALGRIND:-}" ]; then
    set -- env SBX_TEST_TIMEOUT_SCALE=4 valgrind --quiet --error-exitcode=99 \
      --suppressions=tests/valgrind.supp --leak-check=full --errors-for-leak-kinds=definite \
      --show-leak-kinds=definite --trace-children=no "$@"
  fi
  printf '%s\n' "$@"
}

# SBX_PARTS: which parts run, of "unit integration scripts corpora python"
# (all by default).
part() { case " ${SBX_PARTS:-unit integration scripts corpora python} " in *" $1 "*) return 0 ;; esac; return 1; }

# Under valgrind, the cases whose work is all in children memcheck does not
# trace (--trace-children=no) are left to the other stages: test_docker's
# shared suite and Podman runs are other processes, and its 50 containers at
# once check nothing the ASan stage does not.
vg_filter() { case "$1" in test_docker) echo "-shared_suite,-podman,-many" ;; esac; }

# SBX_ONLY="glob ...": only the C binaries (and scripts) whose name matches one.
only() {
  [ -z "${SBX_ONLY:-}" ] && return 0
  local g
  for g in $SBX_ONLY; do case "$(basename "$1")" in $g) return 0 ;; esac; done
  return 1
}

# A test script that lost its exec bit would be skipped without a word: it fails.
noexec=()
while IFS= read -r t; do
  [ -x "$t" ] || noexec+=("$t")
done < <(find "$TESTS" -name 'test_*.sh' -type f 2>/dev/null | sort)
if [ ${#noexec[@]} -gt 0 ]; then
  for t in "${noexec[@]}"; do
    echo "== $t: not executable (chmod +x it; git update-index --chmod=+x): a failure"
    echo "== $t is not executable (chmod +x it): it would not run" >>"$failures"
    failed=$((failed + 1)); failed_names+=("$(basename "$t") (not executable)")
  done
fi

# The Python suite is one long job: it starts first.
if [ -d "$PYTESTS" ] && [ -z "${SBX_SKIP_PYTHON:-}" ] && part python; then
  # A sanitizer build of libsbx can only be loaded into python with its runtime
  # preloaded; Python itself "leaks" by design, so leak checking is off there.
  preload=""
  for rt in asan ubsan; do
    if ldd "$B/libsbx.so" 2>/dev/null | grep -q "lib$rt"; then
      preload="$preload $("${CC:-cc}" -print-file-name=lib$rt.so)"
    fi
  done
  add_job python python "" env LD_PRELOAD="${preload# }" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" \
    SBX_LIB="$PWD/$B/libsbx.so" SBX_CLI="$PWD/$B/sbx" PYTHONPATH="$PWD/python" SBX_PLUGIN_PATH="$FAKES" \
    "$PYTHON" -m pytest -q -p no:cacheprovider "$PYTESTS"
fi

# Binaries split in parts (SBX_TEST_PARTS, below) first: they are the longest.
bins=()
for t in "$B"/tests/integration/test_* "$B"/tests/unit/test_*; do
  grep -aq 'SBX_TEST_PARTS="' "$t" 2>/dev/null && bins=("$t" "${bins[@]}") || bins+=("$t")
done
for t in "${bins[@]}"; do
  [ -x "$t" ] && [ -f "$t" ] || continue
  case "$t" in *.d|*.o) continue;; esac
  case "$t" in */tests/unit/*) part unit || continue ;; *) part integration || continue ;; esac
  only "$t" || continue
  n=$(basename "$t")
  f=""; [ -n "${SBX_VALGRIND:-}" ] && f=$(vg_filter "$n")
  mapfile -t cmd < <(vg "$t")
  # SBX_TEST_SERIAL_CASES="case,...": those cases of the binary run alone
  # (a scale test inside a suite), the rest beside the others.
  cases=$(grep -ao 'SBX_TEST_SERIAL_CASES="[^"]*"' "$t" 2>/dev/null | head -1 | cut -d'"' -f2)
  # SBX_TEST_PARTS="case,...;case,...": a long binary whose cases can run in
  # several processes at once (each makes what it needs, e.g. test_docker its
  # own dockerd): each group is a job of its own, the rest another.
  parts=$(grep -ao 'SBX_TEST_PARTS="[^"]*"' "$t" 2>/dev/null | head -1 | cut -d'"' -f2)
  if [ -n "$cases$parts" ] && [ -z "$f" ] && [ -z "${TAP_FILTER:-}" ]; then
    excl=""
    for c in ${cases//,/ } ${parts//[;,]/ }; do excl="$excl,-$c"; done
    add_job "$n" tap "" env TAP_FILTER="${excl#,}" "${cmd[@]}"
    IFS=';' read -ra groups <<<"$parts"
    for g in "${groups[@]}"; do add_job "$n ($g)" tap "" env TAP_FILTER="$g" "${cmd[@]}"; done
    [ -z "$cases" ] || add_job "$n ($cases)" tap "scale: $cases" env TAP_FILTER="$cases" "${cmd[@]}"
    continue
  fi
  add_job "$n" tap "$(serial_why "$t")" env TAP_FILTER="${f:-${TAP_FILTER:-}}" "${cmd[@]}"
done

# SBX_SKIP_SCRIPTS: the C binaries only (make check-tsan: the scripts build
# programs against libsbx.so with the system compiler, and clang's TSan
# runtime lives in the executable, so those cannot link).
# The pure cgroup v2 guest is emulated (slow): it runs for the plain build only,
# and the sanitizer and valgrind variants check the same code on the host.
variant=plain
if [ -n "${SBX_VALGRIND:-}" ] || ldd "$B/libsbx.so" 2>/dev/null | grep -qE 'lib(a|ub|t)san'; then
  variant=checked
fi
notes=()
for t in "$TESTS"/acceptance/test_*.sh "$TESTS"/integration/test_*.sh "$TESTS"/unit/test_*.sh; do
  [ -x "$t" ] && [ -z "${SBX_SKIP_SCRIPTS:-}" ] && part scripts || continue
  only "$t" || continue
  n=$(basename "$t")
  if [ "$variant" != plain ] && [ "$n" = test_cgroup2_vm.sh ]; then
    notes+=("== $n: plain build only"); continue
  fi
  # SBX_PLAIN_ONLY="why": a script whose check only the plain build makes
  # (install, the examples, the cgroup v2 guest); make check runs those on the
  # plain build and the rest under ASan (SBX_SCRIPTS=plain-only, checked).
  plain_only=$(grep -o 'SBX_PLAIN_ONLY="[^"]*"' "$t" | head -1 | cut -d'"' -f2)
  case "${SBX_SCRIPTS:-all}" in
    plain-only) [ -n "$plain_only" ] || continue ;;
    checked) [ -z "$plain_only" ] || { notes+=("== $n: on the plain build ($plain_only)"); continue; } ;;
  esac
  # Under valgrind a script is worth running only where it puts sbx itself under
  # memcheck: the acceptance scripts do (tests/acceptance/lib.sh wraps "$SBX");
  # bash under memcheck, or a re-run of the others, would cost time and check nothing.
  if [ -n "${SBX_VALGRIND:-}" ]; then
    case "$t" in
      */acceptance/*)
        grep -q 'SBX_NO_VALGRIND_CLI=1' "$t" && { notes+=("== $n: not under valgrind (needs the real process)"); continue; }
        # A script may say why memcheck is not worth its time there: SBX_VALGRIND_SKIP="why".
        why=$(grep -o 'SBX_VALGRIND_SKIP="[^"]*"' "$t" | head -1 | cut -d'"' -f2)
        [ -n "$why" ] && { notes+=("== $n: not under valgrind ($why)"); continue; }
        # SBX_VALGRIND_SCRIPTS="glob ...": only these (make check: the ones that feed hostile input).
        if [ -n "${SBX_VALGRIND_SCRIPTS:-}" ]; then
          m=""; for g in $SBX_VALGRIND_SCRIPTS; do case "$n" in $g) m=1 ;; esac; done
          [ -n "$m" ] || { notes+=("== $n: not under valgrind here (the ASan pass runs it)"); continue; }
        fi
        add_job "$n (sbx under memcheck)" vgacc "$(serial_why "$t")" env B="$B" SBX_PLUGIN_PATH="$FAKES" "$t"
        continue ;;
      *) notes+=("== $n: not under valgrind (runs no sbx code of its own there)"); continue ;;
    esac
  fi
  add_job "$n" tap "$(serial_why "$t")" env B="$B" SBX_PLUGIN_PATH="$FAKES" "$t"
done

for r in "$B"/fuzz/*-replay; do
  [ -x "$r" ] && part corpora || continue
  n=$(basename "$r" -replay)
  mapfile -t cmd < <(vg "$r")
  add_job "$n corpus" tap "" "${cmd[@]}" "fuzz/corpus/$n"
done

# What only the whole run can check: box paths and box interfaces on the host.
HOST_PATHS="/tmp/work /work /work2 /w /sandbox /workspace /tmp/w /tmp/sbx-first-run"
host_state() {
  local h
  for h in $HOST_PATHS; do if [ -e "$h" ] || [ -L "$h" ]; then echo "host path $h"; fi; done
  for h in /sys/class/net/sbx*; do
    h=${h##*/}; [ ${#h} = 15 ] && echo "network interface $h"
  done
  true
}
# Set in every job's environment below: a runner that finds it set runs inside one.
NESTED=${SBX_RUN_HOST_CENSUS:-}
host_before=$(host_state)

# --- running ----------------------------------------------------------------
declare -A PID_JOB=() # pid -> job index
declare -A T0=()
start_job() {
  local i=$1
  mkdir -p "$W/$i.d"
  # Each job's own cgroup level (tests/linux_census.h counts only its groups),
  # and for a script under memcheck its memcheck logs.
  [ "${J_KIND[$i]}" = vgacc ] && chmod 0777 "$W/$i.d"
  SBX_LINUX_CGROUP="sbxt-$$-$i" SBX_VG_LOGS="$W/$i.d" SBX_RUN_HOST_CENSUS=1 \
    setsid timeout -k 30 "$JOB_TIMEOUT" bash "$W/$i.cmd" >"$W/$i.out" 2>&1 </dev/null &
  PID_JOB[$!]=$i; T0[$i]=$SECONDS; running+=("$!")
}

# Prints a finished job's output whole, and counts it.
finish_job() { # index exit-code
  local i=$1 rc=$2 name=${J_NAME[$1]} out="$W/$1.out" nfailed=${#failed_names[@]}
  echo "== $name"
  if [ "${J_KIND[$i]}" = python ]; then
    tail -n 30 "$out" | sed 's/^/   /'
    echo "   # $((SECONDS - T0[$i])) s"
    count_python "$out" "$rc"
    if [ ${#failed_names[@]} != "$nfailed" ]; then
      { echo "== python (exit $rc), its last 60 lines:"; tail -n 60 "$out" | sed 's/^/   /'; } >>"$failures"
    fi
    return
  fi
  grep -vE '^ok [0-9]+ |^--[0-9]+-- ' "$out" | sed 's/^/   /' | grep -v '^   1\.\.' || true
  # Where the suite's time goes.
  echo "   # $((SECONDS - T0[$i])) s"
  count "$name" "$out"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "   # killed after SBX_JOB_TIMEOUT=$JOB_TIMEOUT s: it hung (exit $rc)" | tee -a "$out"
    failed=$((failed + 1)); failed_names+=("$name (hung)")
  # A binary that crashed outside a test, or printed no plan, fails as a whole.
  elif [ "$rc" -ne 0 ] && ! grep -qE '^not ok ' "$out"; then
    failed=$((failed + 1)); failed_names+=("$name (exit $rc)")
  fi
  if [ ${#failed_names[@]} != "$nfailed" ]; then
    { echo "== $name (exit $rc), its last 80 lines but passes:"
      grep -vE '^ok [0-9]+ |^--[0-9]+-- ' "$out" | tail -n 80 | sed 's/^/   /'; } >>"$failures"
  fi
  if [ "${J_KIND[$i]}" = vgacc ]; then
    # What memcheck said about the CLI (the failing checks exited 99).
    local l
    for l in "$W/$i.d"/*.log; do
      [ -s "$l" ] && grep -q '^==[0-9]*== ' "$l" && sed 's/^/   memcheck: /' "$l" | head -40 | tee -a "$failures"
    done
  fi
  rm -rf "$out" "$W/$i.d"
}

wait_one() {
  local pid rc
  wait -n -p pid "${running[@]}"; rc=$?
  [ -n "${pid:-}" ] || return 1
  local i=${PID_JOB[$pid]} keep=() p
  for p in "${running[@]}"; do [ "$p" != "$pid" ] && keep+=("$p"); done
  running=("${keep[@]}")
  finish_job "$i" "$rc"
}

for note in "${notes[@]}"; do echo "$note"; done
serial=()
for i in "${!J_NAME[@]}"; do
  if [ -n "${J_SERIAL[$i]}" ]; then serial+=("$i"); continue; fi
  while [ ${#running[@]} -ge "$JOBS" ]; do wait_one || break; done
  start_job "$i"
done
while [ ${#running[@]} -gt 0 ]; do wait_one || break; done
# The tests that cannot share the host, one at a time with nothing beside them.
for i in "${serial[@]}"; do
  echo "== ${J_NAME[$i]}: alone (${J_SERIAL[$i]})"
  start_job "$i"
  wait_one
done

# A run inside another's job (tests/unit/test_runner.sh's fixtures) leaves
# the census to the outer run: the outer run's other tests change the host
# meanwhile, which this run would take for its own leftovers.
host_after=$(host_state)
left=""
[ -z "$NESTED" ] && left=$(comm -13 <(echo "$host_before" | sort) <(echo "$host_after" | sort) | grep .)
if [ -n "$left" ]; then
  echo "== host census: left on the host by this run (a box path made on the host, a box's interface):"
  echo "$left" | sed 's/^/   /' | tee -a "$failures"
  failed=$((failed + 1)); failed_names+=("host census")
fi

if [ ${#failed_names[@]} -gt 0 ]; then
  echo "== the failures again"; cat "$failures"
  echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
