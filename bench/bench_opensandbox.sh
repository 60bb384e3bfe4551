#!/usr/bin/env bash
# The opensandbox provider against the fake OpenSandbox server on loopback
# (tests/remote/opensandbox_server.py: a test double, commands run as host
# processes), through Python as NeMo Gym code runs it: an exec round trip
# (`true`, p50 of N) and 50 execs at once on one box. The baseline, in the
# same run and on the same loopback: the restbox plugin (the remote kit's
# example) against tests/remote/api_server.py, one JSON request per exec.
# Both servers are Python and fork a shell per command, so the ratio is
# what the provider's protocol costs (an event stream, the readiness probe
# off the clock) over a plain request. Prints the ratios; not pass/fail.
#
#   bench/bench_opensandbox.sh [N]    (N execs for the p50, default 50)
set -u
N=${1:-50}
B=${B:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
[ -f "$B/lib/sbx/providers/opensandbox.so" ] && [ -f "$B/examples/provider/restbox.so" ] ||
  { echo "# bench_opensandbox: build $B/lib/sbx/providers/opensandbox.so and restbox.so first (make all)"; exit 0; }
/usr/bin/python3 -c 'import aiohttp' 2>/dev/null || { echo "# bench_opensandbox: python3-aiohttp missing, skipped"; exit 0; }
W=$(mktemp -d /tmp/sbx-bench-osb.XXXXXX)
export SBX_STATE_DIR="$W/state"
/usr/bin/python3 "$ROOT/tests/remote/opensandbox_server.py" --port-file "$W/osb" --api-key k & osb=$!
/usr/bin/python3 "$ROOT/tests/remote/api_server.py" --port-file "$W/rb" & rb=$!
trap 'kill $osb $rb 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 1 3000); do [ -s "$W/osb" ] && [ -s "$W/rb" ] && break; sleep 0.01; done
export OPENSANDBOX_DOMAIN="127.0.0.1:$(cat "$W/osb")" OPENSANDBOX_API_KEY=k
export SBX_RESTBOX_URL="http://127.0.0.1:$(cat "$W/rb")"
export SBX_PLUGIN_PATH="$B/lib/sbx/providers:$B/examples/provider" SBX_LIB="$B/libsbx.so" PYTHONPATH="$ROOT/python"
/usr/bin/python3 - "$N" <<'PY'
import asyncio, statistics, sys, time
from sbx import AsyncSandbox, SandboxSpec

N = int(sys.argv[1])
CONFIGS = {
    "restbox": {"restbox": {}},
    "opensandbox": {"opensandbox": {"operations": {"background_exec": False},
                                    "probe": {"stable_delay_s": 0.05}}},
}

async def measure(cfg):
    async with AsyncSandbox(cfg, SandboxSpec()) as sb:
        await sb.start()
        await sb.exec("true")  # warm: connections open
        times = []
        for _ in range(N):
            t = time.perf_counter()
            await sb.exec("true")
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        rs = await asyncio.gather(*[sb.exec("echo $$") for _ in range(50)])
        conc = time.perf_counter() - t
        assert all(r.return_code == 0 for r in rs)
        return statistics.median(times), conc

res = {name: asyncio.run(measure(cfg)) for name, cfg in CONFIGS.items()}
(rb_p50, rb_c), (os_p50, os_c) = res["restbox"], res["opensandbox"]
print("exec round trip p50:   opensandbox %7.2f ms   restbox %7.2f ms   ratio %.2fx"
      % (os_p50 * 1e3, rb_p50 * 1e3, os_p50 / rb_p50))
print("50 execs at once:      opensandbox %7.2f ms   restbox %7.2f ms   ratio %.2fx"
      % (os_c * 1e3, rb_c * 1e3, os_c / rb_c))
PY
