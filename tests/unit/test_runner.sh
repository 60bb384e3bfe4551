#!/usr/bin/env bash
# tests/run.sh on fixture directories: a test script without its exec bit
# fails the run (it used to be skipped without a word), and under
# SBX_MUST_WORK=1 a skipped Python test fails it (python/tests/conftest.py),
# as a skipped C test or script does. TAP output.
set -u
cd "$(dirname "$0")/../.."
SBX_PLAIN_ONLY="checks the runner, not libsbx: once is enough"
B=${B:-build}
f=$(mktemp -d /tmp/sbx-runner-test.XXXXXX)
trap 'rm -rf "$f"' EXIT
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$f/out" | tail -n 20; }
# runner WANT_RC WANT_TEXT NAME ENV...: tests/run.sh with ENV, its exit code and a line it must print.
runner() {
  local want=$1 text=$2 name=$3; shift 3
  env -u SBX_MUST_WORK -u SBX_ONLY -u SBX_SCRIPTS -u TAP_FILTER "$@" tests/run.sh >"$f/out" 2>&1
  local rc=$?
  if { [ "$want" = 0 ] && [ $rc = 0 ]; } || { [ "$want" != 0 ] && [ $rc != 0 ]; }; then
    if grep -qF -- "$text" "$f/out"; then ok "$name"; return; fi
  fi
  not_ok "$name (exit $rc)"
}

# 1. A script that lost its exec bit.
mkdir -p "$f/tests/unit" "$f/empty"
printf '#!/bin/sh\necho 1..1\necho "ok 1 - runs"\n' >"$f/tests/unit/test_fixture.sh"
chmod 0644 "$f/tests/unit/test_fixture.sh"
runner 1 "0 passed, 1 failed, 0 skipped" "a test script without its exec bit fails the run" \
  B="$f/empty" SBX_TESTS_DIR="$f/tests" SBX_PARTS=scripts
grep -q 'test_fixture.sh: not executable' "$f/out" && ok "the run names it" || not_ok "the run names it"
chmod 0755 "$f/tests/unit/test_fixture.sh"
runner 0 "1 passed, 0 failed, 0 skipped" "with its exec bit, it runs and passes" \
  B="$f/empty" SBX_TESTS_DIR="$f/tests" SBX_PARTS=scripts

# 2. A script's skip: a skip, and a failure under SBX_MUST_WORK=1.
printf '#!/bin/sh\necho "1..0 # SKIP this machine cannot"\n' >"$f/tests/unit/test_fixture.sh"
runner 0 "0 passed, 0 failed, 1 skipped" "a skipped script counts as a skip" \
  B="$f/empty" SBX_TESTS_DIR="$f/tests" SBX_PARTS=scripts
runner 1 "0 passed, 1 failed, 0 skipped" "under SBX_MUST_WORK=1 a skipped script fails the run" \
  B="$f/empty" SBX_TESTS_DIR="$f/tests" SBX_PARTS=scripts SBX_MUST_WORK=1

# 3. A deliberately skipped Python test, with the suite's own conftest.py.
mkdir -p "$f/py"
ln -s "$PWD/python/tests/conftest.py" "$f/py/conftest.py"
cat >"$f/py/test_fixture.py" <<'PY'
import pytest


def test_passes():
    assert True


def test_skipped():
    pytest.skip("deliberately")


@pytest.mark.skip(reason="deliberately, by a mark")
def test_marked():
    pass
PY
runner 0 "1 passed, 0 failed, 2 skipped" "skipped Python tests count as skips" \
  B="$B" SBX_PYTHON_TESTS="$f/py" SBX_PARTS=python
runner 1 "1 passed, 2 failed, 0 skipped" "under SBX_MUST_WORK=1 skipped Python tests fail the run" \
  B="$B" SBX_PYTHON_TESTS="$f/py" SBX_PARTS=python SBX_MUST_WORK=1
grep -q 'skipped under SBX_MUST_WORK=1: deliberately' "$f/out" && ok "pytest says which skip failed" ||
  not_ok "pytest says which skip failed"

# 4. A binary's scale cases (SBX_TEST_SERIAL_CASES) run alone, the rest beside the others.
mkdir -p "$f/b/tests/integration"
cat >"$f/b/tests/integration/test_fixture" <<'SH'
#!/bin/sh
# SBX_TEST_SERIAL_CASES="big,huge" SBX_TEST_PARTS="p1;p2,p3"
echo "1..1"; echo "ok 1 - runs"; echo "# filter=$TAP_FILTER"
SH
chmod 0755 "$f/b/tests/integration/test_fixture"
runner 0 "4 passed, 0 failed, 0 skipped" "a binary with scale cases and parts runs in four jobs" \
  B="$f/b" SBX_TESTS_DIR="$f/empty" SBX_PARTS=integration
grep -q '^   # filter=-big,-huge,-p1,-p2,-p3$' "$f/out" && ok "once without them" || not_ok "once without them"
grep -q '^   # filter=p1$' "$f/out" && grep -q '^   # filter=p2,p3$' "$f/out" && ok "once per part" ||
  not_ok "once per part"
grep -q '^== test_fixture (big,huge): alone (scale: big,huge)$' "$f/out" &&
  grep -q '^   # filter=big,huge$' "$f/out" && ok "once with them alone, after" || not_ok "once with them alone, after"

# 5. A job that hangs is killed and fails the run, which ends.
mkdir -p "$f/h/unit"
printf '#!/bin/sh\necho 1..1\nwhile :; do sleep 1; done\n' >"$f/h/unit/test_hangs.sh"
chmod 0755 "$f/h/unit/test_hangs.sh"
runner 1 "0 passed, 1 failed, 0 skipped" "a hung script is killed and fails the run" \
  B="$f/empty" SBX_TESTS_DIR="$f/h" SBX_PARTS=scripts SBX_JOB_TIMEOUT=2
grep -q 'killed after SBX_JOB_TIMEOUT=2 s: it hung' "$f/out" && ok "the run says it hung" ||
  not_ok "the run says it hung"

echo "1..$n"
[ "$failed" = 0 ]
