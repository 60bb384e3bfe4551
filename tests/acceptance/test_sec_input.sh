#!/usr/bin/env bash
# Hostile values through the CLI and the Python binding (issue #8): specs,
# configs and options that used to be dropped, cut, blow up or take minutes.
# Each bad value is exit 2 with a message naming the field and what to write
# instead; large but valid input completes; nothing is left behind.
. "$(dirname "$0")/lib.sh"
need_root
cd "$T/host"

# bad OPTION... MESSAGE: `sbx run OPTION... -- true` is a usage error naming MESSAGE.
bad() {
  local want=${!#} args=("${@:1:$#-1}")
  run "sbx run ${args[*]}: exit 2" 2 timeout 60 "$SBX" run "${args[@]}" -- true
  check "  its message says '$want'" has "$ERR" "$want"
}

# --- options
bad --ttl inf "--ttl expects a positive number of seconds, got 'inf'"
bad --ttl -5 "--ttl expects a positive number of seconds"
bad --ready-timeout 1e400 "--ready-timeout expects a positive number of seconds"
bad --timeout inf "--timeout expects a number of seconds, got 'inf'"
bad --timeout nan "--timeout expects a number of seconds"
bad --cpu inf "--cpu expects a positive number, got 'inf'"
bad --cpu nan "--cpu expects a positive number"
bad --timeout 1e300 "--timeout expects a number of seconds, got '1e300'"
bad --ttl 1e12 "--ttl expects a positive number of seconds"
bad --memory 9223372036854775807 "--memory expects a whole number of MiB"
bad --disk 1099511627776 "--disk expects a whole number of GiB"
bad --memory -5 "--memory expects a whole number of MiB"
bad --disk -1 "--disk expects a whole number of GiB"
bad --disk 1.5 "--disk expects a whole number of GiB (the spec takes an integer)"
bad --workdir work "--workdir expects an absolute path in the box (from /), got 'work'"
bad --workdir ./x "--workdir expects an absolute path"

# --- spec files: each value the reference would keep is refused, not dropped
spec() { # NAME TEXT MESSAGE
  printf '%s\n' "$2" >"$1"
  run "spec $1 ($2): exit 2" 2 timeout 60 "$SBX" run --spec "$1" -- true
  check "  its message says '$3'" has "$ERR" "$3"
  check "  its message names the file" has "$ERR" "--spec $1"
}
spec neg_mem.yaml 'resources: {memory_mib: -5}' "resources.memory_mib must be 0 or more, got -5"
spec neg_disk.json '{"resources": {"disk_gib": -1}}' "resources.disk_gib must be 0 or more"
spec neg_cpu.yaml 'resources: {cpu: -0.5}' "resources.cpu must be 0 or more"
spec neg_ttl.yaml 'ttl_s: -1' "ttl_s must be 0 or more seconds, got -1"
spec inf_ttl.yaml 'ttl_s: .inf' "cannot be represented in JSON"
spec huge_ttl.json '{"ttl_s": 1e300}' "ttl_s must be at most 1000000000 seconds"
spec huge_mem.yaml 'resources: {memory_mib: 9223372036854775807}' "resources.memory_mib must be at most"
spec big_ttl.json '{"ttl_s": "1e400"}' "ttl_s must be a finite number of seconds"
spec nan_ready.json '{"ready_timeout_s": "nan"}' "ready_timeout_s must be a finite number"
spec rel_workdir.yaml 'workdir: work' "workdir must be an absolute path in the box, got 'work'"
spec nul_env.json '{"env": {"A": "ok\u0000; rm -rf /"}}' "env['A'] contains a NUL byte"
py -c 'import json; json.dump({"env": {"V%d" % i: "x" * 100000 for i in range(30)}}, open("big_env.json", "w"))'
run "spec big_env.json (30 x 100 KB): exit 2" 2 timeout 60 "$SBX" run --spec big_env.json -- true
check "  its message names the limits" has "$ERR" "Sandbox spec env is too large at 'V20': one variable may hold 128 KiB and all of them 2 MiB"
spec nul_workdir.json '{"workdir": "/tmp\u0000/../etc"}' "workdir contains a NUL byte"

# --- YAML that grew exponentially: 30 levels of mappings as keys was 2 GiB
py -c '
s = "a"
for _ in range(30): s = "[{" + s + ": 1}]"
open("keys.yaml", "w").write("image: " + s + "\n")
lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
for i in range(1, 10): lines.append("l%d: &l%d [%s]" % (i, i, ", ".join(["*l%d" % (i - 1)] * 10)))
open("laughs.yaml", "w").write("sandbox:\n  local: {}\n" + "\n".join(lines) + "\n")
'
run "spec with mappings as keys: exit 2" 2 timeout 60 "$SBX" run --spec keys.yaml -- true
check "  its message names the line and the mistake" has "$ERR" "line 1, column"
check "  ... a list used as a mapping key" has "$ERR" "a list used as a mapping key"
run "config with an alias bomb: exit 2" 2 timeout 60 "$SBX" run --config laughs.yaml --block sandbox -- true
check "  its message names the file and the bound" has "$ERR" "laughs.yaml: invalid YAML at line"
check "  ... the bound" has "$ERR" "aliases expand to more than 100000 values"
census "after bad values"

# --- 100,000 env entries: minutes of CPU in the agent before; linear now.
# The shell is sh: bash itself imports its environment in quadratic time
# (100,000 variables take it minutes; docs/providers/linux.md says so).
py -c '
import json
env = {"E%05x" % i: "1" for i in range(100000)}
env["E00007"] = "spec"
json.dump({"env": env}, open("env.json", "w"))
'
run "100,000 env entries: the command runs" 0 timeout 300 "$SBX" run --provider '{linux: {shell: sh}}' --spec env.json -e E00009=cli -- \
  sh -c 'echo "$E00000 $E00007 $E00009 $E1869f"; env | grep -c "^E[0-9a-f]\{5\}="'
check "  the spec's values arrive, the CLI's -e wins over the spec" [ "$(echo "$OUT" | head -1)" = "1 spec cli 1" ]
check "  each name once: 100000 variables" [ "$(echo "$OUT" | tail -1)" = "100000" ]
census "after the large env"

# --- the Python binding refuses what C refuses, and a NUL is never cut
cat >bad_values.py <<'PYEOF'
import asyncio, math, sys
from sbx import cprovider
from sbx.base import SandboxSpec, SandboxResources

def refused(fn, want):
    try:
        fn()
    except ValueError as e:
        assert want in str(e), (want, str(e))
        return
    raise AssertionError("not refused: " + want)

specs = [
    (SandboxSpec(ttl_s=-1), "ttl_s must be 0 or more"),
    (SandboxSpec(ttl_s=math.inf), "ttl_s must be a finite number"),
    (SandboxSpec(ready_timeout_s=math.nan), "ready_timeout_s must be a finite number"),
    (SandboxSpec(resources=SandboxResources(memory_mib=-5)), "resources.memory_mib must be 0 or more"),
    (SandboxSpec(resources=SandboxResources(cpu=-1.0)), "resources.cpu must be 0 or more"),
    (SandboxSpec(resources=SandboxResources(cpu=math.inf)), "resources.cpu must be a finite number"),
    (SandboxSpec(workdir="rel"), "workdir must be an absolute path"),
    (SandboxSpec(workdir="/tmp\0/../etc"), "workdir contains a NUL byte"),
    (SandboxSpec(env={"A": "x\0y"}), "env['A'] contains a NUL byte"),
]
for spec, want in specs:
    refused(lambda: cprovider.spec_to_c(spec), want)
refused(lambda: cprovider.exec_opts(None, {"A": "x\0y"}, None, None), "env['A'] contains a NUL byte")
refused(lambda: cprovider.exec_opts("/tmp\0x", None, None, None), "cwd contains a NUL byte")
refused(lambda: cprovider.exec_opts(None, None, math.inf, None), "timeout_s must be a finite number")
refused(lambda: cprovider.exec_opts(None, {"BIG": "x" * 200000}, None, None), "env['BIG'] is not valid")
print("ok")
PYEOF
export PYTHONPATH="$ROOT/python" SBX_LIB="$B/libsbx.so"
run "python: bad values raise ValueError" 0 py bad_values.py
check "  python printed ok" [ "$OUT" = ok ]

finish
