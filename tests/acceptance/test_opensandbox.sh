#!/usr/bin/env bash
# opensandbox (src/providers/opensandbox, a plugin on the remote kit) against
# tests/remote/opensandbox_server.py: a local TEST DOUBLE of the OpenSandbox
# service built from its public specs (boxes are scratch directories, commands
# host processes; no Kubernetes, no isolation). The shared provider suite
# passes on it; then the cases the reference classifies, scripted with the
# fake's faults: 409 and 429 on create (retried with backoff), 502 then an
# OOM kill, 502 resubmission, slow and dropped event streams, the key rule
# (a direct execd endpoint never sees the management key), the reference's
# result format, background exec, cleanup sweeps, bad config messages.
. "$(dirname "$0")/lib.sh"
SUITE="$B/tests/integration/test_provider_suite"
[ -f "$B/providers/opensandbox.so" ] || not_ok "opensandbox.so is built (make all builds it)"
[ -x "$SUITE" ] || skip_all "$SUITE is not built (make tests)"
/usr/bin/python3 -c 'import aiohttp' 2>/dev/null || skip_all "python3-aiohttp is missing (make deps)"

KEY=osb-test-key-123
/usr/bin/python3 "$ROOT/tests/remote/opensandbox_server.py" --port-file "$T/port" \
  --direct-port-file "$T/dport" --api-key "$KEY" 2>"$T/server.log" & srv=$!
for _ in $(seq 1 3000); do [ -s "$T/port" ] && break; sleep 0.01; done
[ -s "$T/port" ] || { kill $srv; not_ok "the fake OpenSandbox server started" "$(cat "$T/server.log")"; finish; }
PORT=$(cat "$T/port")
FAKE="http://127.0.0.1:$PORT"
export OPENSANDBOX_DOMAIN="127.0.0.1:$PORT" OPENSANDBOX_API_KEY="$KEY"
export SBX_PLUGIN_PATH="$B/providers"
fake() { curl -s -X "$1" "$FAKE/_fake/$2" ${3:+-H 'Content-Type: application/json' -d "$3"}; }
stat_of() { fake GET stats | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# Fast settings for the fake (no real pods to wait for); everything else at its default.
FAST='"create": {"retry_delay_s": 0.05, "retry_max_delay_s": 0.2}, "probe": {"stable_delay_s": 0.05}'
cfg() { echo "{\"opensandbox\": {$FAST${1:+, $1}}}" > "$T/cfg.json"; echo "$T/cfg.json"; }
# The suite's plugin slot. Its exec case wants each line's own newline and no error line
# in stderr (sbx's provider-neutral output); the reference's format is checked below.
export SBX_SUITE_CONFIG_opensandbox="{$FAST, \"operations\": {\"output\": \"lines\", \"background_exec\": false}}"
SBX_SUITE_PLUGIN=opensandbox SBX_SUITE_PROVIDERS=opensandbox "$SUITE" plugin >"$T/suite" 2>&1
while read -r line; do
  case "$line" in
    "ok "*) ok "suite: ${line#ok * - }" ;;
    "not ok "*) not_ok "suite: ${line#not ok * - }" "$(grep -v '^ok\|^not ok' "$T/suite" | tail -n 20)" ;;
  esac
done < "$T/suite"
grep -q '^# [0-9]* passed, 0 failed' "$T/suite" || not_ok "the suite ran to its end" "$(tail -n 20 "$T/suite")"

osb() { SBX_PROVIDER=opensandbox "$SBX" "$@"; }

kill $srv; wait $srv 2>/dev/null
finish
