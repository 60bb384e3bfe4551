#!/usr/bin/env bash
# Runs every test binary (TAP), the fuzz corpus replays and the Python tests,
# and ends with one line: "N passed, N failed, N skipped".
set -u
B=${B:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
cd "$(dirname "$0")/.."
# The test doubles `fake` and `fake_basic` are not in libsbx: the C binaries link
# them, and what runs the CLI or Python (the scripts, the Python tests) loads
# them as a plugin.
FAKES="${SBX_PLUGIN_PATH:+$SBX_PLUGIN_PATH:}$PWD/$B/tests/fakes/sbx-fake.so"
passed=0 failed=0 skipped=0
failed_names=()
# What each failing test printed, printed again at the end: CI keeps only the
# tail of a long log, and the failure must be in it.
failures=$(mktemp); trap 'rm -f "$failures"' EXIT

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

run_one() { # name, command...
  local name=$1; shift
  local out; out=$(mktemp) t0=$SECONDS
  echo "== $name"
  # run_native=1: a script that puts what it runs under memcheck itself.
  if [ -n "${SBX_VALGRIND:-}" ] && [ -z "${run_native:-}" ]; then
    SBX_TEST_TIMEOUT_SCALE=4 valgrind --quiet --error-exitcode=99 --suppressions=tests/valgrind.supp --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite --trace-children=no "$@" >"$out" 2>&1
  else
    "$@" >"$out" 2>&1
  fi
  local rc=$? nfailed=${#failed_names[@]}
  grep -vE '^ok [0-9]+ |^--[0-9]+-- ' "$out" | sed 's/^/   /' | grep -v '^   1\.\.' || true
  # Where the suite's time goes (CI should stay under 30 minutes).
  echo "   # $((SECONDS - t0)) s"
  count "$name" "$out"
  # A binary that crashed outside a test, or printed no plan, fails as a whole.
  if [ $rc -ne 0 ] && ! grep -qE '^not ok ' "$out"; then
    failed=$((failed + 1)); failed_names+=("$name (exit $rc)")
  fi
  if [ ${#failed_names[@]} != "$nfailed" ]; then
    { echo "== $name (exit $rc), its last 80 lines but passes:"
      grep -vE '^ok [0-9]+ |^--[0-9]+-- ' "$out" | tail -n 80 | sed 's/^/   /'; } >> "$failures"
  fi
  rm -f "$out"
}

# SBX_PARTS: which parts run, of "unit integration scripts corpora python"
# (all by default): make check runs the parts that make no box beside the
# ASan stage.
part() { case " ${SBX_PARTS:-unit integration scripts corpora python} " in *" $1 "*) return 0 ;; esac; return 1; }

# Under valgrind, the cases whose work is all in children memcheck does not
# trace (--trace-children=no) are left to the other stages: test_docker's
# shared suite and Podman runs are other processes, and its 50 containers at
# once check nothing the ASan stage does not.
vg_filter() { case "$1" in test_docker) echo "-shared_suite,-podman,-many" ;; esac; }

# SBX_ONLY="glob ...": only the C binaries whose name matches one of them.
only() {
  [ -z "${SBX_ONLY:-}" ] && return 0
  local g
  for g in $SBX_ONLY; do case "$(basename "$1")" in $g) return 0 ;; esac; done
  return 1
}

for t in "$B"/tests/unit/test_* "$B"/tests/integration/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.d|*.o) continue;; esac
  case "$t" in */tests/unit/*) part unit || continue ;; *) part integration || continue ;; esac
  only "$t" || continue
  f=""; [ -n "${SBX_VALGRIND:-}" ] && f=$(vg_filter "$(basename "$t")")
  TAP_FILTER=${f:-${TAP_FILTER:-}} run_one "$(basename "$t")" "$t"
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
for t in tests/unit/test_*.sh tests/integration/test_*.sh tests/acceptance/test_*.sh; do
  [ -x "$t" ] && [ -z "${SBX_SKIP_SCRIPTS:-}" ] && part scripts || continue
  if [ "$variant" != plain ] && [ "$(basename "$t")" = test_cgroup2_vm.sh ]; then
    echo "== $(basename "$t"): plain build only"; continue
  fi
  # Under valgrind a script is worth running only where it puts sbx itself under
  # memcheck: the acceptance scripts do (tests/acceptance/lib.sh wraps "$SBX");
  # bash under memcheck, or a re-run of the others, would cost time and check nothing.
  if [ -n "${SBX_VALGRIND:-}" ]; then
    case "$t" in
      tests/acceptance/*)
        grep -q 'SBX_NO_VALGRIND_CLI=1' "$t" && { echo "== $(basename "$t"): not under valgrind (needs the real process)"; continue; }
        # A script may say why memcheck is not worth its time there: SBX_VALGRIND_SKIP="why".
        why=$(grep -o 'SBX_VALGRIND_SKIP="[^"]*"' "$t" | head -1 | cut -d'"' -f2)
        [ -n "$why" ] && { echo "== $(basename "$t"): not under valgrind ($why)"; continue; }
        vglogs=$(mktemp -d /tmp/sbx-vglogs.XXXXXX); chmod 0777 "$vglogs"
        run_native=1 run_one "$(basename "$t") (sbx under memcheck)" env B="$B" SBX_PLUGIN_PATH="$FAKES" SBX_VG_LOGS="$vglogs" "$t"
        # What memcheck said about the CLI (the failing checks exited 99).
        for l in "$vglogs"/*.log; do
          [ -s "$l" ] && grep -q '^==[0-9]*== ' "$l" && sed 's/^/   memcheck: /' "$l" | head -40 | tee -a "$failures"
        done
        rm -rf "$vglogs"; continue ;;
      *) echo "== $(basename "$t"): not under valgrind (runs no sbx code of its own there)"; continue ;;
    esac
  fi
  run_one "$(basename "$t")" env B="$B" SBX_PLUGIN_PATH="$FAKES" "$t"
done

for r in "$B"/fuzz/*-replay; do
  [ -x "$r" ] && part corpora || continue
  n=$(basename "$r" -replay)
  run_one "$n corpus" "$r" "fuzz/corpus/$n"
done

if [ -d python/tests ] && [ -z "${SBX_SKIP_PYTHON:-}" ] && part python; then
  echo "== python"
  out=$(mktemp)
  # A sanitizer build of libsbx can only be loaded into python with its runtime
  # preloaded; Python itself "leaks" by design, so leak checking is off there.
  preload=""
  for rt in asan ubsan; do
    if ldd "$B/libsbx.so" 2>/dev/null | grep -q "lib$rt"; then
      preload="$preload $("${CC:-cc}" -print-file-name=lib$rt.so)"
    fi
  done
  LD_PRELOAD="${preload# }" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" \
  SBX_LIB="$PWD/$B/libsbx.so" SBX_CLI="$PWD/$B/sbx" PYTHONPATH="$PWD/python" SBX_PLUGIN_PATH="$FAKES" \
    "$PYTHON" -m pytest -q -p no:cacheprovider python/tests >"$out" 2>&1
  rc=$?
  tail -n 30 "$out" | sed 's/^/   /'
  line=$(grep -E '[0-9]+ (passed|failed)' "$out" | tail -1)
  p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 0)
  e=$(echo "$line" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+' || echo 0)
  s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0} + ${e:-0})); skipped=$((skipped + ${s:-0}))
  if [ $rc -ne 0 ] && [ "${f:-0}${e:-0}" = "00" ]; then failed=$((failed + 1)); fi
  if [ $rc -ne 0 ]; then
    failed_names+=("python")
    { echo "== python (exit $rc), its last 60 lines:"; tail -n 60 "$out" | sed 's/^/   /'; } >> "$failures"
  fi
  rm -f "$out"
fi

if [ ${#failed_names[@]} -gt 0 ]; then
  echo "== the failures again"; cat "$failures"
  echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
