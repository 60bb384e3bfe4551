#!/usr/bin/env bash
# The examples run as a user would run them. TAP output.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
echo "1..1"
trap "rm -rf /tmp/sbx-first-run" EXIT
out=$("$B/examples/first_run" local 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "return code 0, stdout: hello from a sandbox" &&
   echo "$out" | grep -q "^started local-"; then
  echo "ok 1 - examples/first_run on the local provider"
else
  echo "not ok 1 - examples/first_run on the local provider"; echo "$out" | sed 's/^/# /'
fi
