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
# Terminals (provider ABI 3's pty_open over the service's WebSocket): sbx shell on a
# terminal (script(1) makes one), and Python's sandbox.pty with attach and takeover.
id=$(SBX_PROVIDER=restbox "$SBX" create 2>"$T/err")
if command -v script >/dev/null; then
  out=$(printf 'echo shell-$((6*7)); exit 3\n' | SBX_PROVIDER=restbox timeout 60 script -qec "$SBX shell $id" /dev/null 2>&1); rc=$?
  check "sbx shell on restbox: exit 3" [ "$rc" = 3 ]
  check "sbx shell on restbox: its output" has "$out" "shell-42"
fi
SBX_PROVIDER=restbox "$SBX" stop "$id" >/dev/null 2>&1
cat > "$T/pty.py" <<'EOF'
import asyncio
import pytest
from sbx import AsyncSandbox, SandboxPtyError, SandboxSpec

async def go():
    async with AsyncSandbox({"restbox": {}}, SandboxSpec()) as sb:
        await sb.start()
        r = await sb.pty.exec("echo hi; echo err >&2; exit 3", timeout_s=60)
        assert (r.return_code, r.error_type) == (3, None), r
        assert "hi\r\n" in r.stdout and "err\r\n" in r.stdout, r
        r = await sb.pty.exec("echo hi; echo err >&2; exit 4", timeout_s=60, pty=False)
        assert (r.stdout, r.stderr, r.return_code) == ("hi\n", "err\n", 4), r
        s = await sb.pty.create(rows=30, cols=90)
        assert s.mode == "pty" and s.session_id.isdigit()
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
        # A session held by a client is refused to another without takeover.
        with pytest.raises(SandboxPtyError, match="already has an attached client"):
            await sb.pty.attach(b.session_id, takeover=False)
        await b.write(b"exit 6\n")
        assert await b.wait_exit(timeout_s=60) == 6
        await b.close()
        print("pty ok")

asyncio.run(go())
EOF
out=$(SBX_LIB="$B/libsbx.so" PYTHONPATH="$ROOT/python" py "$T/pty.py" 2>&1)
check "Python's sandbox.pty on restbox: exec, create, attach, takeover" has "$out" "pty ok"
[ "${out#*pty ok}" = "$out" ] && echo "$out" | tail -n 20 | sed 's/^/# /'

# A service that is not there: a clear error, no hang.
out=$(SBX_PROVIDER=restbox SBX_RESTBOX_URL=http://127.0.0.1:1 "$SBX" ls 2>&1); rc=$?
check "an unreachable service: an error" [ "$rc" != 0 ]
check "... that names it" has "$out" "127.0.0.1:1"

kill $srv; wait $srv 2>/dev/null
finish
