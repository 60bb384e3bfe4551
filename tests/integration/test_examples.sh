#!/usr/bin/env bash
# The examples run as a user would run them, and leave nothing behind. TAP output.
set -u
# tests/run.sh: make check runs this on the plain build only.
SBX_PLAIN_ONLY="the examples as a user builds them"
cd "$(dirname "$0")/../.."
B=${B:-build}
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
echo "1..2"
t=$(mktemp -d /tmp/sbx-examples.XXXXXX)
trap 'rm -rf "$t"' EXIT
mkdir "$t/tmp"
# A host path the example once used as its workdir: made by this run, it is a leak.
[ -e /tmp/sbx-first-run ] && before=1 || before=
out=$(cd "$t" && TMPDIR="$t/tmp" SBX_STATE_DIR="$t/state" "$B/examples/first_run" local 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "return code 0, stdout: hello from a sandbox" &&
   echo "$out" | grep -q "^started local-"; then
  echo "ok 1 - examples/first_run on the local provider"
else
  echo "not ok 1 - examples/first_run on the local provider"; echo "$out" | sed 's/^/# /'
fi
# Its box's scratch directory (under TMPDIR), its record, nothing in the cwd or on the host.
left=$(find "$t/tmp" "$t/state/local" -mindepth 1 2>/dev/null; ls -A "$t" | grep -vx -e tmp -e state
       [ -z "$before" ] && [ -e /tmp/sbx-first-run ] && echo /tmp/sbx-first-run)
if [ -z "$left" ]; then
  echo "ok 2 - examples/first_run leaves nothing (workspace, record, files)"
else
  echo "not ok 2 - examples/first_run leaves nothing (workspace, record, files)"; echo "# left: $left"
fi
