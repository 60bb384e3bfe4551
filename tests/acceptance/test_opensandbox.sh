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
[ -f "$B/lib/sbx/providers/opensandbox.so" ] || not_ok "opensandbox.so is built (make all builds it)"
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
export SBX_PLUGIN_PATH="$B/lib/sbx/providers"
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
check "suite: its terminals ran on execd's PTY (POST /pty)" [ "$(stat_of '["pty_creates"]')" -ge 2 ]
check "suite: ... and each was deleted when closed" [ "$(stat_of '["pty_deletes"]')" = "$(stat_of '["pty_creates"]')" ]

osb() { SBX_PROVIDER=opensandbox "$SBX" "$@"; }


export SBX_LIB="$B/libsbx.so" PYTHONPATH="$ROOT/python"
# res CONFIG-JSON COMMAND: one box, one exec, through the Python binding (the reference's API):
# prints the result as JSON {rc, out, err, type}, or {"error": "..."} when the box or exec raised.
res() {
  py - "$@" <<'PY'
import json, sys
from sbx import Sandbox, SandboxSpec
cfg, cmd = json.loads(sys.argv[1]), sys.argv[2]
timeout = float(sys.argv[3]) if len(sys.argv) > 3 else None
try:
    with Sandbox({"opensandbox": cfg}, SandboxSpec()) as sb:
        sb.start()
        r = sb.exec(cmd, timeout_s=timeout)
        print(json.dumps({"rc": r.return_code, "out": r.stdout, "err": r.stderr,
                          "type": r.error_type}))
except Exception as e:
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
PY
}
field() { /usr/bin/python3 -c "import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print(json.dumps(v))" "$1" "$2"; }
FG="$FAST, \"operations\": {\"background_exec\": false}"

# --- results as the reference builds them ---
fake POST reset >/dev/null
r=$(res "{$FG}" 'echo out; echo err >&2; exit 7')
check "the probe ran stable_count (2) times: 3 commands with the exec" [ "$(stat_of '["commands"]')" = 3 ]
check "reference result: exit 7" [ "$(field "$r" rc)" = 7 ]
check "reference result: stdout is the lines joined (no last newline)" [ "$(field "$r" out)" = '"out"' ]
check "reference result: stderr ends with the error event" [ "$(field "$r" err)" = '"err\nCommandExecError: 7"' ]
r=$(res "{$FG}" 'true')
check "reference result: no output is None, not an empty string" [ "$(field "$r" out)" = null ] && [ "$(field "$r" err)" = null ]
fake POST reset >/dev/null
r=$(res "{$FAST, \"operations\": {\"background_poll_initial_s\": 0.1, \"background_poll_interval_s\": 0.2}}" 'echo partial; sleep 30' 1)
check "background exec past its timeout: rc 125, error_type timeout" [ "$(field "$r" rc)" = 125 ] && [ "$(field "$r" type)" = '"timeout"' ]
check "... and the command is interrupted (DELETE /command?id=)" [ "$(stat_of '["interrupts"]')" = 1 ]
r=$(res "{$FAST}" 'echo out; echo err >&2; exit 5')
check "background exec (the shipped default): rc from the status" [ "$(field "$r" rc)" = 5 ]
check "background exec: stdout is the merged log" [ "$(field "$r" out)" = '"out\nerr\n"' ]
check "background exec: stderr is the status's error" [ "$(field "$r" err)" = '"exit status 5"' ]
r=$(res "{$FG}" 'echo partial; sleep 30' 1)
check "a timeout: rc 125, error_type timeout" [ "$(field "$r" rc)" = 125 ] && [ "$(field "$r" type)" = '"timeout"' ]
check "a timeout keeps what came before it" [ "$(field "$r" out)" = '"partial"' ]

# --- the create request: the SDK's defaults, attribution, provider_options ---
fake POST reset >/dev/null
r=$(NEMO_GYM_RUN_ID='run/42 x' NEMO_GYM_TEAM=rl res "{$FG}" 'true')
body=$(stat_of '["last_create"]')
for want in "'entrypoint': ['tail', '-f', '/dev/null']" "'resourceLimits': {'cpu': '1', 'memory': '2Gi'}" \
    "'timeout': 600" "'secureAccess': False" "'imagePullPolicy': 'IfNotPresent'" \
    "'opensandbox.extensions.image-pull-policy': 'IfNotPresent'" \
    "'nemo-gym.nvidia.com/run': 'run_42_x'" "'nemo-gym.nvidia.com/team': 'rl'"; do
  check "create body: $want" has "$body" "$want"
done
spec='{"provider_options": {"bogus": 1}}'
out=$(py - <<PY 2>&1
from sbx import Sandbox, SandboxSpec
try:
    Sandbox({"opensandbox": {}}, SandboxSpec(provider_options={"bogus": 1})).start()
except Exception as e:
    print(type(e).__name__, e)
try:
    Sandbox({"opensandbox": {}}, SandboxSpec(provider_options={"extensions": {"imagePullPolicy": "Sometimes"}})).start()
except Exception as e:
    print(type(e).__name__, e)
PY
)
check "an unknown provider option is refused, naming the allowed ones" has "$out" "unknown provider_options key 'bogus' (allowed: extensions"
check "a bad pull policy is refused, naming the allowed ones" has "$out" "must be one of Always, IfNotPresent, Never, got 'Sometimes'"

# --- create: the reference's retry classification ---
fake POST reset >/dev/null; fake POST faults '{"create": [409, 429]}' >/dev/null
r=$(res "{$FG}" 'echo ok')
check "409 then 429 on create: retried with backoff, then the box works" [ "$(field "$r" out)" = '"ok"' ]
check "... three create requests" [ "$(stat_of '["creates"]')" = 3 ]
fake POST reset >/dev/null; fake POST faults '{"create": [400]}' >/dev/null
r=$(res "{$FG}" 'true')
check "400 on create: not retried" [ "$(stat_of '["creates"]')" = 1 ]
check "... the error names the status" has "$(field "$r" error)" "400"
fake POST reset >/dev/null; fake POST faults '{"create": [503, 503, 503, 503]}' >/dev/null
r=$(res "{$FAST, \"create\": {\"retries\": 2, \"retry_delay_s\": 0.01}}" 'true')
check "503 past create.retries: fails after retries+1 attempts" [ "$(stat_of '["creates"]')" = 3 ]
check "... saying how many" has "$(field "$r" error)" "after 3 attempts"
fake POST reset >/dev/null; fake POST faults '{"pending_s": 0.6}' >/dev/null
r=$(res "{$FG}" 'echo ready')
check "a pod still pending: /ping polled until execd answers" [ "$(field "$r" out)" = '"ready"' ]
fake POST faults '{"pending_s": 0}' >/dev/null

# A create cancelled while it waits for execd: the box it made is deleted, none is left.
fake POST reset >/dev/null; fake POST faults '{"pending_s": 3}' >/dev/null
out=$(py - "{$FAST}" <<'PY' 2>&1
import asyncio, json, sys
from sbx import AsyncSandbox, SandboxSpec
async def main():
    sb = AsyncSandbox({"opensandbox": json.loads(sys.argv[1])}, SandboxSpec())
    t = asyncio.ensure_future(sb.start())
    await asyncio.sleep(0.5)
    t.cancel()
    try:
        await t
    except asyncio.CancelledError:
        print("cancelled")
asyncio.run(main())
PY
)
fake POST faults '{"pending_s": 0}' >/dev/null
check "a create cancelled during readiness: cancelled" has "$out" cancelled
check "... and its box deleted" [ "$(stat_of '["live"]')" = 0 ] && [ "$(stat_of '["deletes"]')" = 1 ]

# --- exec: 502 resubmission, the OOM check, event streams ---
# exec502 CONFIG FAULTS [CMD]: a box, then the faults, then one exec (the Python binding).
exec502() {
  py - "$1" "$2" "$FAKE" "${3:-echo again}" <<'PY'
import json, sys, urllib.request
from sbx import Sandbox, SandboxSpec
cfg, faults, fake = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
with Sandbox({"opensandbox": cfg}, SandboxSpec()) as sb:
    sb.start()
    urllib.request.urlopen(urllib.request.Request(fake + "/_fake/reset", data=b"{}"))
    urllib.request.urlopen(urllib.request.Request(
        fake + "/_fake/faults", data=faults.encode(), headers={"Content-Type": "application/json"}))
    try:
        r = sb.exec(sys.argv[4])
        print(json.dumps({"rc": r.return_code, "out": r.stdout}))
    except Exception as e:
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
PY
}
OPS="$FAST, \"operations\": {\"background_exec\": false, \"retries\": 2}"
r=$(exec502 "{$OPS}" '{"command": [502]}')
check "one 502 from execd's proxy: resubmitted, the command runs" [ "$(field "$r" out)" = '"again"' ]
check "... two submissions" [ "$(stat_of '["commands"]')" = 2 ]
r=$(exec502 "{$OPS}" '{"command": [502, 502, 502, 502, 502]}')
check "502 on every submission: an error" has "$r" '"error"'
check "... saying the backend is likely dead" has "$r" "likely dead"
check "... after operations.retries + 1 submissions" [ "$(stat_of '["commands"]')" = 3 ]
r=$(exec502 "{$OPS}" '{"oom": true}')
check "a 502 from an OOM-killed sandbox: an error that says so" has "$r" "Sandbox was OOM-killed"
check "... with the pod's reason" has "$r" "OOMKilled"
check "... and no resubmission (the OOM check ends it)" [ "$(stat_of '["commands"]')" = 0 ]
r=$(exec502 "{$OPS}" '{"sse_delay_ms": 300}' 'echo a; echo b; echo c')
check "a slow event stream: every line, in order" [ "$(field "$r" out)" = '"a\nb\nc"' ]
r=$(exec502 "{$OPS}" '{"sse_drop_after": 1}' 'echo a; echo b; echo c')
check "a stream dropped mid-way: an error, not a short result" has "$r" '"error"'
r=$(exec502 "{$OPS}" '{"sse_cut": true}' 'echo a')
check "a stream that ends without its last event: an error saying so" has "$r" "without a completion or error event"
fake POST reset >/dev/null

# --- terminals (provider ABI 3's pty_open over execd's /pty WebSocket) ---
fake POST reset >/dev/null
if command -v script >/dev/null; then
  id=$(osb create 2>"$T/err")
  out=$(printf 'echo shell-$((6*7)); exit 3\n' | SBX_PROVIDER=opensandbox timeout 60 script -qec "$SBX shell $id" /dev/null 2>&1); rc=$?
  check "sbx shell on opensandbox: exit 3" [ "$rc" = 3 ]
  check "sbx shell on opensandbox: its output" has "$out" "shell-42"
  osb stop "$id" >/dev/null 2>&1
fi
cat > "$T/pty.py" <<'EOF'
import asyncio, json, os, sys
import pytest
from sbx import AsyncSandbox, SandboxPtyError, SandboxSpec

async def go():
    cfg = json.loads(sys.argv[1])
    async with AsyncSandbox({"opensandbox": cfg}, SandboxSpec()) as sb:
        await sb.start()
        r = await sb.pty.exec("echo hi; echo err >&2; exit 3", timeout_s=60)
        assert (r.return_code, r.error_type) == (3, None), r
        assert "hi\r\n" in r.stdout and "err\r\n" in r.stdout, r
        r = await sb.pty.exec("echo hi; echo err >&2; exit 4", timeout_s=60, pty=False)
        assert (r.stdout, r.stderr, r.return_code) == ("hi\n", "err\n", 4), r
        # The reference's rewrite: env K=shq(v) sh -c shq(cmd), then su for a user not root.
        r = await sb.pty.exec("echo \"$PTY_E\"", env={"PTY_E": "it's $HOME"}, timeout_s=60, pty=False)
        assert (r.stdout, r.return_code) == ("it's $HOME\n", 0), r
        if os.geteuid() == 0:
            r = await sb.pty.exec("id -un; echo \"$PTY_E\"", env={"PTY_E": "x y"}, user="nobody",
                                  timeout_s=60, pty=False)
            assert (r.stdout, r.return_code) == ("nobody\nx y\n", 0), r
        s = await sb.pty.create(rows=30, cols=90)
        assert s.mode == "pty", s.mode
        await s.write(b"stty size; echo FIRST-$((1+1))\n")
        got = b""
        while b"FIRST-2" not in got:
            got += await s.read(timeout_s=60)
        assert b"30 90" in got, got
        b = await sb.pty.attach(s.session_id, takeover=True, since=0)
        replay = b""
        while b"FIRST-2" not in replay:
            replay += await b.read(timeout_s=60)
        with pytest.raises(SandboxPtyError, match="taken over"):
            while await s.read(timeout_s=60):
                pass
        await s.close()
        with pytest.raises(SandboxPtyError, match="already has an attached client"):
            await sb.pty.attach(b.session_id, takeover=False)
        await b.write(b"exit 6\n")
        assert await b.wait_exit(timeout_s=60) == 6
        await b.close()
        print("pty ok")

asyncio.run(go())
EOF
# (sbx shell above frees its ended session without waiting: its DELETE may not make it out.)
fake POST reset >/dev/null
out=$(py "$T/pty.py" "{$FAST}" 2>&1)
check "Python's sandbox.pty on opensandbox: exec, env and user, create, attach, takeover" has "$out" "pty ok"
[ "${out#*pty ok}" = "$out" ] && echo "$out" | tail -n 20 | sed 's/^/# /'
check "terminals: sessions this client created are deleted; one taken over is left to its taker" \
  [ "$(stat_of '["pty_deletes"]')" = "$(( $(stat_of '["pty_creates"]') - 1 ))" ]
fake POST reset >/dev/null
out=$(py "$T/pty.py" "{$FAST, \"connection\": {\"use_server_proxy\": false}}" 2>&1)
check "terminals on a direct endpoint work too" has "$out" "pty ok"
[ "${out#*pty ok}" = "$out" ] && echo "$out" | tail -n 20 | sed 's/^/# /'
check "... and carry OPEN-SANDBOX-API-KEY there (the reference's PTY key rule)" [ "$(stat_of '["pty_saw_key"]')" -gt 0 ]

# Hostile or failing execd terminals: clear errors, nothing left behind.
cat > "$T/ptybad.py" <<'EOF'
import asyncio, json, sys, urllib.request
from sbx import AsyncSandbox, SandboxSpec

def fault(d):
    r = urllib.request.Request(sys.argv[2] + "/_fake/faults", json.dumps(d).encode(),
                               {"Content-Type": "application/json"})
    urllib.request.urlopen(r).read()

async def expect_error(sb, want, **kw):
    try:
        s = await sb.pty.create(**kw)
        while await s.read(timeout_s=30):
            pass
        await s.close()
    except Exception as e:  # SandboxPtyError, SandboxError, TimeoutError
        assert want in str(e), (want, str(e))
        print("error ok:", want)
        return
    raise AssertionError("no error for " + want)

async def go():
    async with AsyncSandbox({"opensandbox": json.loads(sys.argv[1])}, SandboxSpec()) as sb:
        await sb.start()
        fault({"pty_create": [403]})
        await expect_error(sb, "PTY create failed with HTTP 403")
        fault({"pty_ws": ["error"]})
        await expect_error(sb, "PTY session failed: INJECTED: injected refusal")
        fault({"pty_ws": ["notjson"]})
        await expect_error(sb, "not a JSON object with a type")
        fault({"pty_ws": ["huge"]})
        await expect_error(sb, "terminal")
        # A socket that dies under a running session: redialled, nothing lost or doubled.
        fault({"pty_ws": ["drop"]})
        s = await sb.pty.create()
        await s.write(b"echo A-$((1+1))\n")
        got = b""
        while b"A-2" not in got:
            got += await s.read(timeout_s=30)
        await asyncio.sleep(1.5)
        await s.write(b"echo B-$((2+1)); exit 7\n")
        while True:
            chunk = await s.read(timeout_s=30)
            if not chunk:
                break
            got += chunk
        assert b"B-3" in got and got.count(b"A-2") == 1, got  # the replay since what we had: no double
        assert await s.wait_exit(timeout_s=30) == 7
        await s.close()
        print("redial ok")
        # execd not behind the proxy yet: POST /pty answers 404; tried again, as the reference.
        fault({"pty_create": [404, 404]})
        r = await sb.pty.exec("echo after-404", timeout_s=60, pty=False)
        assert (r.stdout, r.return_code) == ("after-404\n", 0), r
        fault({"pty_ws": ["junk"]})
        r = await sb.pty.exec("echo after-junk; exit 5", timeout_s=60)
        assert r.return_code == 5 and r.stdout == "after-junk\r\n", r
        print("hostile ok")

asyncio.run(go())
EOF
fake POST reset >/dev/null
out=$(py "$T/ptybad.py" "{$FAST}" "$FAKE" 2>&1)
check "terminals: a refused create, an error frame, bad JSON, a frame over 1 MiB: clear errors" has "$out" "hostile ok"
check "terminals: junk frames (empty, short, unknown channel, odd replay) are dropped" has "$out" "hostile ok"
check "terminals: a socket that dies under a session is redialled (takeover, since), nothing lost or doubled" has "$out" "redial ok"
check "... (the fake did drop it)" [ "$(stat_of '["pty_drops"]')" = 1 ]
[ "${out#*hostile ok}" = "$out" ] && echo "$out" | tail -n 20 | sed 's/^/# /'
check "terminals: a 404 from POST /pty is tried again" [ "$(stat_of '["pty_posts"]')" = "$(( $(stat_of '["pty_creates"]') + 3 ))" ]
check "terminals: every session made was deleted, those that failed to open too" \
  [ "$(stat_of '["pty_deletes"]')" = "$(stat_of '["pty_creates"]')" ]

# --- the key rule: a direct endpoint never receives the management key (exec, files) ---
fake POST reset >/dev/null
r=$(res "{$FG, \"connection\": {\"use_server_proxy\": false}}" 'echo direct')
check "direct endpoint: the command runs (with execd's own token)" [ "$(field "$r" out)" = '"direct"' ]
check "direct endpoint: execd was reached directly" [ "$(stat_of '["direct_requests"]')" -gt 0 ]
check "direct endpoint: never sent OPEN-SANDBOX-API-KEY" [ "$(stat_of '["direct_saw_key"]')" = 0 ]
check "direct endpoint: nothing went through the proxy" [ "$(stat_of '["proxy_requests"]')" = 0 ]
out=$(py - <<PY 2>&1
from sbx import Sandbox, SandboxSpec
for proxy in (False, True):
    cfg = {"connection": {"use_server_proxy": proxy}, "probe": {"stable_delay_s": 0.05}}
    with Sandbox({"opensandbox": cfg}, SandboxSpec(ports=[8080])) as sb:
        sb.start()
        ep = sb.endpoint(8080)
        print(proxy, ep.endpoint, sorted(ep.headers))
PY
)
check "endpoint, direct: the pod's URL with execd's token, no key" has "$out" "False http://127.0.0.1:$(cat "$T/dport")/direct/"
check "... and no management key in its headers" bash -c "grep '^False' <<<'$out' | grep -vq OPEN-SANDBOX-API-KEY"
check "endpoint, through the proxy: the key goes with it" bash -c "grep '^True' <<<'$out' | grep -q OPEN-SANDBOX-API-KEY"

# --- serialize / connect: the only connectable provider of the reference ---
fake POST reset >/dev/null
out=$(py - "{$FG}" <<'PY' 2>&1
import asyncio, json, sys
from sbx import AsyncSandbox, SandboxSpec
cfg = json.loads(sys.argv[1])
async def main():
    async with AsyncSandbox({"opensandbox": cfg}, SandboxSpec()) as sb:
        await sb.start()
        d = await sb.serialize()
        print("descriptor", json.dumps(d, sort_keys=True))
        other = await AsyncSandbox.connect(d, provider=sb._provider)
        r = await other.exec("echo connected")
        print("exec", r.stdout)
        try:
            await AsyncSandbox.connect({"sandbox_id": "nope"}, provider=sb._provider)
        except Exception as e:
            print("unknown", type(e).__name__, e)
asyncio.run(main())
PY
)
check "serialize gives {sandbox_id} (and the facade's workdir)" has "$out" 'descriptor {"sandbox_id": "'
check "connect: the descriptor's box runs commands" has "$out" "exec connected"
check "connect to an unknown id: a clear error" has "$out" "no sandbox nope on the server"
check "... and the box is gone after its owner stopped" [ "$(stat_of '["live"]')" = 0 ]

# --- gc: cleanup_sandboxes (audit with --dry-run, reap otherwise) ---
fake POST reset >/dev/null
a=$(SBX_PROVIDER=opensandbox "$SBX" create --config "$(cfg)" --label sweep=r1 </dev/null)
b=$(SBX_PROVIDER=opensandbox "$SBX" create --config "$(cfg)" --label sweep=r1 </dev/null)
k=$(SBX_PROVIDER=opensandbox "$SBX" create --config "$(cfg)" --label sweep=keep </dev/null)
out=$(SBX_PROVIDER=opensandbox "$SBX" gc --dry-run --label sweep=r1 2>&1)
check "gc --dry-run (the audit) names both" bash -c "has() { case \"\$1\" in *\"\$2\"*) return 0;; *) return 1;; esac; }; has '$out' '$a' && has '$out' '$b'"
check "... and removes nothing" [ "$(stat_of '["live"]')" = 3 ]
SBX_PROVIDER=opensandbox "$SBX" gc --label sweep=r1 >/dev/null 2>&1
check "gc --label reaps the run's boxes, and only them" [ "$(stat_of '["live"]')" = 1 ]
check "... the other box stays" has "$(SBX_PROVIDER=opensandbox "$SBX" ls -q)" "$k"
SBX_PROVIDER=opensandbox "$SBX" stop "$k" >/dev/null 2>&1
fake POST reset >/dev/null
# A box made by someone else's process (straight on the service: no local record of it).
curl -s -X POST "$FAKE/v1/sandboxes" -H "OPEN-SANDBOX-API-KEY: $KEY" -H 'Content-Type: application/json' \
  -d '{"entrypoint": ["tail"], "resourceLimits": {"cpu": "1"}, "metadata": {"nemo-gym.nvidia.com/user": "alice"}}' >/dev/null
fake POST faults '{"oom": true}' >/dev/null
NEMO_GYM_USER=bob SBX_PROVIDER=opensandbox "$SBX" gc >/dev/null 2>&1
check "a plain gc leaves another user's failed box alone (a shared service)" [ "$(stat_of '["live"]')" = 1 ]
NEMO_GYM_USER=alice SBX_PROVIDER=opensandbox "$SBX" gc >/dev/null 2>&1
check "... and collects its own user's" [ "$(stat_of '["live"]')" = 0 ]

# --- bad config: the messages say what and how to fix ---
badcfg() { echo "$1" > "$T/bad.json"; SBX_PROVIDER=opensandbox "$SBX" run --config "$T/bad.json" -- true </dev/null 2>&1; }
check "an unknown key is named" has "$(badcfg '{"opensandbox": {"create": {"retires": 3}}}')" "unknown key 'retires' in create"
check "a wrong type says what it must be" has "$(badcfg '{"opensandbox": {"create": {"retries": "x"}}}')" "create.retries must be"
check "a protocol outside http/https is refused" has "$(badcfg '{"opensandbox": {"connection": {"protocol": "ftp"}}}')" "connection.protocol"
check "a key prefix that is no DNS subdomain is refused" has "$(badcfg '{"opensandbox": {"attribution": {"key_prefix": "Bad_Prefix/"}}}')" "lowercase DNS subdomain"
out=$(OPENSANDBOX_DOMAIN= badcfg '{"opensandbox": {}}')
check "no domain: says where to set one" has "$out" "set connection.domain in the config (host:port or a URL), or \$OPENSANDBOX_DOMAIN"
out=$(OPENSANDBOX_API_KEY=wrong badcfg '{"opensandbox": {}}')
check "a wrong API key: the 401 is named" has "$out" "401"

# A service that is not there: a clear error, no hang.
# (the shipped config retries a create for minutes: no retries here)
echo '{"opensandbox": {"operations": {"retries": 0}, "create": {"retries": 0}}}' > "$T/noretry.json"
out=$(OPENSANDBOX_DOMAIN=127.0.0.1:1 SBX_PROVIDER=opensandbox "$SBX" run --config "$T/noretry.json" -- true </dev/null 2>&1); rc=$?
check "an unreachable service: an error" [ "$rc" != 0 ]
check "... that names it" has "$out" "127.0.0.1:1"
check "nothing left on the fake" [ "$(stat_of '["live"]')" = 0 ]

kill $srv; wait $srv 2>/dev/null
finish
