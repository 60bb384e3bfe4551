#!/usr/bin/env bash
# Ctrl-C (SIGINT) and SIGTERM at various moments of `sbx run` and `sbx create`:
# sbx exits 128+N and no box is left. The delays only spread the signal over
# the phases (before the handlers, image work, shim start, the command);
# nothing is asserted about how long anything takes.
. "$(dirname "$0")/lib.sh"
need_root
set -m # background jobs get SIGINT (without job control bash makes them ignore it)

# Waits until background job $1 has exec'd sbx. Before that it is still a copy
# of bash, whose own SIGINT handler would swallow the signal (sbx would then
# run its `sleep 60` to the end and exit 0): not the window under test.
SBX_EXE=$(readlink -f "$SBX")
started() { while [ "$(readlink "/proc/$1/exe" 2>/dev/null)" != "$SBX_EXE" ] && kill -0 "$1" 2>/dev/null; do :; done; }

# One `sbx run`, SIGINTed $1 s after it exec'd: sets rc, took, st.
interrupt_run() {
  local t0=$SECONDS p
  "$SBX" run -- sleep 60 >"$T/out" 2>"$T/err" </dev/null & p=$!
  started $p; sleep $1; st=$(grep -E '^Sig(Blk|Ign|Cgt)' /proc/$p/status 2>/dev/null | tr '\n\t' '  ')
  kill -INT $p; wait $p; rc=$?; took=$((SECONDS - t0))
}
for d in 0 0.002 0.005 0.01 0.02 0.05 0.1 0.3; do
  interrupt_run $d
  if [ $rc != 130 ]; then
    # Twice under heavy mixed load (valgrind runs alongside) a run went on to
    # finish its sleep with exit 0, as if the SIGINT never came, and it never
    # repeated: unexplained, and recorded here. A second miss at the same
    # moment fails the test.
    echo "# run, SIGINT after ${d}s: exit $rc after $took s (signals before the kill: $st; stderr: $(head -c 200 "$T/err")); once more"
    interrupt_run $d
  fi
  if [ $rc = 130 ]; then ok "run, SIGINT after ${d}s: exit 130"
  else not_ok "run, SIGINT after ${d}s: exit 130 (got $rc)" "after $took s; signal state before the kill: $st" "stdout: $(head -c 300 "$T/out")" "stderr: $(head -c 300 "$T/err")"; fi
  if [ -s "$T/err" ] && ! grep -qs "interrupted by SIGINT" "$T/err"; then not_ok "run SIGINT message" "$(cat "$T/err")"; fi
done
census "after interrupted runs"

for d in 0.02 0.3; do
  "$SBX" run -- sleep 60 >"$T/out" 2>"$T/err" </dev/null & p=$!
  started $p; sleep $d; kill -TERM $p; wait $p; rc=$?
  check "run, SIGTERM after ${d}s: exit 143 (got $rc)" [ $rc = 143 ]
done
census "after SIGTERMed runs"

for d in 0 0.002 0.005 0.01 0.02 0.05; do
  "$SBX" create >"$T/out" 2>"$T/err" </dev/null & p=$!
  started $p; sleep $d; kill -INT $p 2>/dev/null; wait $p; rc=$?
  id=$(cat "$T/out")
  if [ $rc = 0 ]; then
    # It finished first: the box is recorded, and stop removes it.
    check "create done before SIGINT (${d}s) recorded its box" [ -f "$SBX_STATE_DIR/boxes/$id.json" ]
    "$SBX" stop "$id" >/dev/null
  else
    check "create, SIGINT after ${d}s: exit 130 (got $rc), no id printed" [ $rc = 130 -a -z "$id" ]
  fi
done
census "after interrupted creates"

# exec interrupted: the command is killed, the box keeps running.
id=$("$SBX" create </dev/null)
"$SBX" exec "$id" -- sh -c 'echo $$ > /tmp/pid; sleep 60' </dev/null >/dev/null 2>&1 & p=$!
for i in $(seq 1 100); do "$SBX" exec "$id" -- test -s /tmp/pid </dev/null && break; sleep 0.1; done
kill -INT $p; wait $p; rc=$?
check "exec, SIGINT: exit 130 (got $rc)" [ $rc = 130 ]
run "the box still runs after an interrupted exec" 0 "$SBX" exec "$id" -- sh -c 'kill -0 $(cat /tmp/pid) 2>/dev/null && echo alive || echo gone'
check "the interrupted command is gone" [ "$OUT" = gone ]
"$SBX" stop "$id" >/dev/null

finish
