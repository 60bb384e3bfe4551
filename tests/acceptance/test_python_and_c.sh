#!/usr/bin/env bash
# docs/python.md's example (as written, then on linux) through the Python
# binding, its error mapping for a user mistake, and the C first-run example
# built against this tree; each followed by a leak census.
. "$(dirname "$0")/lib.sh"
need_root
export SBX_LIB="$B/libsbx.so" PYTHONPATH="$ROOT/python"
cd "$T/host"

example() { # provider
  cat <<PYEOF
import asyncio
from sbx import AsyncSandbox, SandboxSpec

async def main():
    async with AsyncSandbox({"$1": {}}, SandboxSpec(files={"hello.py": "print('hi')\n"})) as box:
        await box.start()
        r = await box.exec("python3 hello.py", timeout_s=60)
        print(r.return_code, r.stdout)

asyncio.run(main())
PYEOF
}
example local >ex_local.py
run "docs/python.md example (local)" 0 py ex_local.py
check "prints 0 hi" [ "$OUT" = "0 hi" ]
example linux >ex_linux.py
run "docs/python.md example on linux (relative startup file, no workdir)" 0 py ex_linux.py
check "prints 0 hi on linux" [ "$OUT" = "0 hi" ]
census "after the python examples"

run "blocking Sandbox, unknown image: SandboxCreateError naming the fix" 0 py -c '
from sbx import Sandbox, SandboxSpec, SandboxCreateError
s = Sandbox({"linux": {}}, SandboxSpec(image="nosuch"))
try:
    s.start()
    print("started?!")
except SandboxCreateError as e:
    print("SandboxCreateError", e)
s.stop()'
check "error says to import the image" has "$OUT" "SandboxCreateError creating linux sandbox: image nosuch is not imported"
run "blocking Sandbox, exec status and OOM" 0 py -c '
from sbx import Sandbox, SandboxSpec, SandboxResources
with Sandbox({"linux": {}}, SandboxSpec(resources=SandboxResources(memory_mib=1))) as s:
    s.start()
    r = s.exec("echo hi; exit 3")
    print(r.return_code, r.stdout.strip())
    r = s.exec("python3 -c \"print(1)\"")
    print(r.return_code, r.error_type)'
check "exit 3 and the OOM kill reported" [ "$(echo $OUT)" = "3 hi 137 oom" ]
run "AsyncSandbox cycles leave no descriptor open" 0 py -c '
import asyncio, gc, os
from sbx import AsyncSandbox, SandboxSpec
async def cycle():
    async with AsyncSandbox({"linux": {}}, SandboxSpec(workdir="/w", files={"a.txt": "x"})) as box:
        await box.start()
        r = await box.exec("cat a.txt")
        assert r.stdout == "x", r
async def main():
    await cycle()  # the first one loads the library and starts its loop
    # A shared provider lives while a sandbox refers to it, and a finished
    # sandbox may wait for the cycle collector: collect before each count.
    gc.collect()
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(3):
        await cycle()
    gc.collect()
    after = sorted(os.listdir("/proc/self/fd"))
    print("same" if before == after else "leaked %s -> %s" % (before, after))
asyncio.run(main())'
check "descriptors before and after are the same" [ "$OUT" = same ]
census "after the blocking sandbox"

if cc "$ROOT/examples/first_run.c" -I"$ROOT/include" "$B/libsbx.so" -Wl,-rpath,"$B" -o first_run 2>"$T/err"; then
  ok "examples/first_run.c compiles"
  run "first_run on linux" 0 env LD_PRELOAD="$preload" ./first_run linux
  check "prints hello from a sandbox" has "$OUT" "return code 0, stdout: hello from a sandbox"
else
  not_ok "examples/first_run.c compiles" "$(cat "$T/err")"
fi

finish
