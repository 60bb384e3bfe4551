"""Many boxes from Python: providers shared per config, 1000 live linux
boxes inside the default `ulimit -n 1024`, nothing left after stop or exit,
and running out of descriptors reported as such (never MemoryError).

The linux runs happen in a subprocess, so its RLIMIT_NOFILE and its exit
(the atexit stop of boxes left running) are its own."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path


import sbx
from sbx import AsyncSandbox, Sandbox, SandboxSpec, create_provider
from sbx.cprovider import CProvider
from conftest import need_provider, run

PYTHON_DIR = str(Path(__file__).resolve().parents[1])


# --- provider sharing (fake provider: no boxes) ---------------------------------


def test_sandboxes_from_one_config_share_one_c_provider():
    a = AsyncSandbox({"fake": {"marker": "x"}})
    b = AsyncSandbox({"fake": {"marker": "x"}}, SandboxSpec())
    s = Sandbox({"fake": {"marker": "x"}})
    assert isinstance(a._provider, CProvider)
    assert a._provider is b._provider is s._async_sandbox._provider
    assert a._provider._ptr.value == b._provider._ptr.value  # one C sbx_provider
    # Another config, and a provider object made by the caller, are their own.
    assert AsyncSandbox({"fake": {"marker": "y"}})._provider is not a._provider
    fresh = create_provider({"fake": {"marker": "x"}})
    assert fresh is not a._provider and AsyncSandbox(fresh)._provider is fresh
    # Key order does not matter: the key is the canonical JSON of the config.
    c1 = AsyncSandbox({"fake": {"marker": "z", "fail": {}}})
    c2 = AsyncSandbox({"fake": {"fail": {}, "marker": "z"}})
    assert c1._provider is c2._provider
    s.stop()


def test_shared_provider_is_released_with_its_last_sandbox():
    async def go():
        a = AsyncSandbox({"fake": {"marker": "released"}}, SandboxSpec())
        b = AsyncSandbox({"fake": {"marker": "released"}}, SandboxSpec())
        await a.start()
        await b.start()
        ref = weakref.ref(a._provider)
        await a.stop()
        del a
        gc.collect()
        assert ref() is not None  # b still runs on it
        await b.stop()
        del b
        gc.collect()
        assert ref() is None
        # The next sandbox with that config gets a new provider.
        assert AsyncSandbox({"fake": {"marker": "released"}})._provider is not None

    run(go())


def test_python_providers_are_not_shared():
    from conftest import RecordingProvider

    sbx.register_provider("recording", RecordingProvider)
    a = AsyncSandbox({"recording": {}})
    b = AsyncSandbox({"recording": {}})
    assert a._provider is not b._provider
    assert a._csb is None


# --- linux, in a subprocess -----------------------------------------------------


def _run_child(script: str, guard_s: float = 900) -> dict:
    """Runs `script` in a fresh interpreter; it prints one JSON line last."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=guard_s,  # a hang guard only
    )
    assert p.returncode == 0, f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def _leftovers(state_dir: str, ids: list[str]) -> dict:
    """What is left of these boxes on the host: processes (a shim names its
    box dir; everything in a box runs in its cgroup), cgroups, box dirs."""
    wanted = set(ids)
    procs = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{pid}/cgroup") as f:
                groups = {line.rstrip("\n").rsplit("/", 1)[-1] for line in f}
        except OSError:
            continue
        if state_dir in cmd or groups & wanted:
            procs.append(f"{pid}: {cmd[:120]}")
    # The provider's level (tests/run.sh gives each test its own,
    # SBX_LINUX_CGROUP) under each hierarchy's root: /sys/fs/cgroup itself
    # (pure v2) or each controller's and the unified one (hybrid); its
    # `.nomem` level holds the unlimited boxes on pure v2. Other tests'
    # groups come and go meanwhile: a directory gone while read is not ours.
    level = os.environ.get("SBX_LINUX_CGROUP") or "sbx"
    top = Path("/sys/fs/cgroup")
    try:
        roots = [top] + [r for r in top.iterdir() if r.is_dir()]
    except OSError:
        roots = [top]
    cgroups = []
    for root in roots:
        for base in (root / level, root / level / ".nomem"):
            try:
                cgroups += [d.name for d in base.iterdir() if d.name in wanted]
            except OSError:
                pass
    boxes = os.path.join(state_dir, "boxes")
    dirs = [d for d in os.listdir(boxes) if d in wanted] if os.path.isdir(boxes) else []
    return {"processes": procs, "cgroups": sorted(set(cgroups)), "box_dirs": dirs}


def _wait_gone(state_dir: str, ids: list[str]) -> dict:
    """A stopped box's last processes are reaped by the kernel a moment
    later: poll (the bound is a hang guard, not a timing assertion)."""
    end = time.monotonic() + 300
    while True:
        left = _leftovers(state_dir, ids)
        if not any(left.values()) or time.monotonic() > end:
            return left
        time.sleep(0.2)


BOXES = 1000
BATCH = 100  # operations in flight at once: each awaited future holds an eventfd

CHILD_1000 = """
    import asyncio, gc, json, os, resource, sys, time
    from sbx import AsyncSandbox, SandboxSpec

    N, BATCH, STATE = {n}, {batch}, {state!r}
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    cfg = {{"linux": {{"state_dir": STATE}}}}

    def nfd():
        return len(os.listdir("/proc/self/fd"))

    async def main():
        # Warm up once, so one-time descriptors (libuv's, Python's) are in the baseline.
        async with AsyncSandbox(cfg, SandboxSpec()) as w:
            await w.start()
        gc.collect()
        base = nfd()
        boxes, peak = [], 0
        t0 = time.monotonic()
        for i in range(0, N, BATCH):
            batch = [AsyncSandbox(cfg, SandboxSpec()) for _ in range(BATCH)]
            await asyncio.gather(*(b.start() for b in batch))
            peak = max(peak, nfd())
            out = await asyncio.gather(*(b.exec("echo $((6*7))") for b in batch))
            assert all((r.stdout, r.return_code) == ("42\\n", 0) for r in out), out[:3]
            peak = max(peak, nfd())
            boxes += batch
        created = time.monotonic() - t0
        live = nfd()
        ids = [b.sandbox_id for b in boxes]
        assert len(set(ids)) == N
        assert len({{id(b._provider) for b in boxes}}) == 1  # one shared provider
        t1 = time.monotonic()
        for i in range(0, N, BATCH):
            await asyncio.gather(*(b.stop() for b in boxes[i:i + BATCH]))
        stopped = time.monotonic() - t1
        del boxes, batch
        gc.collect()
        print(json.dumps({{"base": base, "live": live, "peak": peak, "after": nfd(), "ids": ids,
                          "create_exec_s": created, "stop_s": stopped}}))

    asyncio.run(main())
"""


def test_1000_live_linux_boxes_fit_in_ulimit_1024(tmp_path):
    need_provider("linux")
    state = str(tmp_path / "state")
    out = _run_child(CHILD_1000.format(n=BOXES, batch=BATCH, state=state))
    print(
        f"\n{BOXES} boxes: create+exec {out['create_exec_s']:.1f}s, stop {out['stop_s']:.1f}s; "
        f"fds base {out['base']}, all live {out['live']}, peak {out['peak']}, after stop {out['after']}"
    )
    # All 1000 ran under the limit (the child would have failed otherwise),
    # and the live boxes hold far fewer descriptors than one each.
    assert out["live"] < 1024 and out["peak"] < 1024
    assert out["live"] - out["base"] < BOXES // 2
    # No descriptor kept after the stops. Fewer than the baseline is no leak:
    # the warm-up box's stop may still have been closing one (its shim's
    # watch) when the baseline was counted.
    assert out["after"] <= out["base"]
    assert _wait_gone(state, out["ids"]) == {"processes": [], "cgroups": [], "box_dirs": []}


CHILD_EXIT = """
    import asyncio, json, resource
    from sbx import AsyncSandbox, SandboxSpec

    N, BATCH, STATE = {n}, {batch}, {state!r}
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    keep = []

    async def main():
        cfg = {{"linux": {{"state_dir": STATE}}}}
        for i in range(0, N, BATCH):
            batch = [AsyncSandbox(cfg, SandboxSpec()) for _ in range(BATCH)]
            await asyncio.gather(*(b.start() for b in batch))
            keep.extend(batch)

    asyncio.run(main())
    # Exit with every box still running: the atexit hook stops them.
    print(json.dumps({{"ids": [b.sandbox_id for b in keep]}}))
"""


def test_boxes_left_running_are_stopped_at_exit(tmp_path):
    need_provider("linux")
    state = str(tmp_path / "state")
    out = _run_child(CHILD_EXIT.format(n=BOXES, batch=BATCH, state=state))
    assert len(out["ids"]) == BOXES
    assert _wait_gone(state, out["ids"]) == {"processes": [], "cgroups": [], "box_dirs": []}


CHILD_LOW = """
    import asyncio, json, resource
    from sbx import AsyncSandbox, SandboxSpec

    resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    cfg = {{"{provider}": {cfg}}}

    async def main():
        boxes, error = [], None
        try:
            for _ in range(2000):
                boxes.append(AsyncSandbox(cfg, SandboxSpec()))
                await boxes[-1].start()
            # Then many operations in flight on the boxes that did start.
            await asyncio.gather(*(b.exec("true") for b in boxes * 5))
        except BaseException as e:
            error = e
        # What did start still stops, out of descriptors or not.
        for b in boxes:
            await b.stop()
        return error, [b.sandbox_id for b in boxes if b.sandbox_id]

    e, ids = asyncio.run(main())
    print(json.dumps({{"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__],
                      "errno": getattr(e, "errno", None), "message": str(e), "ids": ids}}))
"""


def test_running_out_of_descriptors_says_so(tmp_path):
    need_provider("linux")
    state = str(tmp_path / "state")
    # Enough to start a few boxes; max_agent_connections above the limit, so
    # the pool does not save us and the process really runs out.
    cfg = json.dumps({"state_dir": state, "max_agent_connections": 4096})
    out = _run_child(CHILD_LOW.format(limit=48, provider="linux", cfg=cfg))
    print("\nout of descriptors:", out["type"], out["message"])
    assert out["type"] != "NoneType", "the process never ran out of descriptors"
    assert "MemoryError" not in out["mro"]
    assert out["type"] in ("SandboxDescriptorError", "SandboxCreateError")
    assert "OSError" in out["mro"] or "RuntimeError" in out["mro"]
    assert "too many open files" in out["message"].lower()
    assert "ulimit -n" in out["message"]
    assert _wait_gone(state, out["ids"]) == {"processes": [], "cgroups": [], "box_dirs": []}


CHILD_POLL = """
    import asyncio, json, os, resource
    from sbx import AsyncSandbox, SandboxSpec

    async def main():
        sb = await AsyncSandbox({"fake": {}}, SandboxSpec()).start()
        # Leave no descriptor for the futures' eventfds.
        used = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 2, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        out = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(200)))
        await sb.stop()
        return [json.loads(r.stdout)["command"] for r in out], str(await sb.status())

    cmds, status = asyncio.run(main())
    print(json.dumps({"cmds": cmds, "status": status}))
"""


def test_operations_complete_when_no_descriptor_is_left_to_watch_them():
    """200 operations in flight with no descriptors left for their futures:
    they are polled for instead, and all complete (stop() included)."""
    out = _run_child(CHILD_POLL)
    assert out["cmds"] == [f"echo {i}" for i in range(200)]
    assert out["status"] == "SandboxStatus.STOPPED"


CHILD_BUDGET = """
    import asyncio, json, os, resource
    from sbx import AsyncSandbox, SandboxSpec
    from sbx import _lib

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    async def main():
        sb = await AsyncSandbox({"fake": {}}, SandboxSpec()).start()
        base, peak = len(os.listdir("/proc/self/fd")), 0
        done = False

        async def watch():
            nonlocal peak
            while not done:
                peak = max(peak, len(os.listdir("/proc/self/fd")))
                await asyncio.sleep(0)

        w = asyncio.create_task(watch())
        out = await asyncio.gather(*(sb.exec("sleep 0.2") for i in range(1000)))
        done = True
        await w
        await sb.stop()
        return sum(r.return_code == 0 for r in out), peak - base

    ok, extra = asyncio.run(main())
    print(json.dumps({"ok": ok, "extra": extra, "budget": _lib._fd_budget()}))
"""


def test_futures_in_flight_hold_a_bounded_number_of_descriptors():
    """1000 operations in flight hold at most the budget's eventfds (a
    quarter of RLIMIT_NOFILE); the rest are polled, and all complete."""
    out = _run_child(CHILD_BUDGET)
    assert out["ok"] == 1000
    assert out["budget"] == 64
    assert 0 < out["extra"] <= out["budget"] + 8  # a few for the fake's own timers
