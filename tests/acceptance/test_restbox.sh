#!/usr/bin/env bash
# restbox, the remote kit's example provider (examples/provider/restbox.c,
# a plugin on <sbx/http.h>), passes the shared provider suite against the
# restbox API of tests/remote/api_server.py, a local test double of a REST
# sandbox service; and the CLI drives it like any provider.
. "$(dirname "$0")/lib.sh"
SUITE="$B/tests/integration/test_provider_suite"
[ -f "$B/examples/provider/restbox.so" ] || not_ok "restbox.so is built (make tests builds it)"
[ -x "$SUITE" ] || skip_all "$SUITE is not built (make tests)"
/usr/bin/python3 -c 'import aiohttp' 2>/dev/null || skip_all "python3-aiohttp is missing (make deps)"

/usr/bin/python3 "$ROOT/tests/remote/api_server.py" --port-file "$T/port" & srv=$!
for _ in $(seq 1 3000); do [ -s "$T/port" ] && break; sleep 0.01; done
[ -s "$T/port" ] || { kill $srv; not_ok "the API server started"; finish; }
export SBX_RESTBOX_URL="http://127.0.0.1:$(cat "$T/port")"
export SBX_PLUGIN_PATH="$B/examples/provider"

# The suite's plugin slot, restbox in it: its own TAP lines as comments, one verdict a case.
SBX_SUITE_PLUGIN=restbox SBX_SUITE_PROVIDERS=restbox "$SUITE" plugin >"$T/suite" 2>&1
while read -r line; do
  case "$line" in
    "ok "*) ok "suite: ${line#ok * - }" ;;
    "not ok "*) not_ok "suite: ${line#not ok * - }" "$(grep -v '^ok\|^not ok' "$T/suite" | tail -n 20)" ;;
  esac
done < "$T/suite"
grep -q '^# [0-9]* passed, 0 failed' "$T/suite" || not_ok "the suite ran to its end" "$(tail -n 20 "$T/suite")"

# The CLI: run, exec's exit code and output, ls, stop by id.
out=$(SBX_PROVIDER=restbox "$SBX" run -- sh -c 'echo hi; exit 3' 2>&1); rc=$?
check "sbx run on restbox: exit 3" [ "$rc" = 3 ]
check "sbx run on restbox: its output" has "$out" "hi"
id=$(SBX_PROVIDER=restbox "$SBX" create 2>"$T/err")
check "sbx create on restbox" [ -n "$id" ]
check "sbx ls lists it" has "$(SBX_PROVIDER=restbox "$SBX" ls -q)" "$id"
check "sbx stop ID" env SBX_PROVIDER=restbox "$SBX" stop "$id"
check "sbx ls is empty again" [ -z "$(SBX_PROVIDER=restbox "$SBX" ls -q)" ]
# A service that is not there: a clear error, no hang.
out=$(SBX_PROVIDER=restbox SBX_RESTBOX_URL=http://127.0.0.1:1 "$SBX" ls 2>&1); rc=$?
check "an unreachable service: an error" [ "$rc" != 0 ]
check "... that names it" has "$out" "127.0.0.1:1"

kill $srv; wait $srv 2>/dev/null
finish
