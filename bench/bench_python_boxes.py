#!/usr/bin/env python3
"""Boxes from Python, as NeMo Gym code makes them: AsyncSandbox({"linux": {}})
per box. Times create+ready+exec for 1 box (median of 5) and for 100 boxes
at once, then 1000 boxes in batches of 100 (SBX_BENCH_BOXES sets the count),
and counts the process's descriptors while they are all live.

SBX_BENCH_EXECS=N then runs N rounds of `exec("true")` on every live box
(SBX_BENCH_INFLIGHT, default 500, at once) and stops them all at once,
counting every failure: the scale run of docs/scale.md is

    SBX_BENCH_BOXES=10000 SBX_BENCH_EXECS=100 ...

The process runs under a soft descriptor limit of 1024 (the default most
users have), lowered if it was higher.

    SBX_LIB=build/libsbx.so PYTHONPATH=python python3 bench/bench_python_boxes.py
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import sbx  # noqa: E402
from sbx import _lib  # noqa: E402

CFG = {"linux": {}}
MANY = int(os.environ.get("SBX_BENCH_BOXES", "1000"))
EXECS = int(os.environ.get("SBX_BENCH_EXECS", "0"))
INFLIGHT = int(os.environ.get("SBX_BENCH_INFLIGHT", "500"))
BATCH = 100


def nfd() -> int:
    return len(os.listdir("/proc/self/fd"))


async def create_exec(n: int) -> float:
    """Seconds to have n boxes started and each answer one exec."""
    boxes = [sbx.AsyncSandbox(CFG, sbx.SandboxSpec()) for _ in range(n)]
    t = time.perf_counter()
    await asyncio.gather(*(b.start() for b in boxes))
    out = await asyncio.gather(*(b.exec("true") for b in boxes))
    dt = time.perf_counter() - t
    assert all(r.return_code == 0 for r in out)
    await asyncio.gather(*(b.stop() for b in boxes))
    return dt


async def main() -> None:
    if not _lib.c_provider_exists("linux"):
        print("bench_python_boxes: the linux provider is not built; nothing to measure")
        return
    await create_exec(1)  # warm up (image, caches)
    one = statistics.median([await create_exec(1) for _ in range(5)])
    hundred = await create_exec(100)
    gc.collect()
    base = nfd()
    boxes: list[sbx.AsyncSandbox] = []
    t = time.perf_counter()
    for _ in range(0, MANY, BATCH):
        batch = [sbx.AsyncSandbox(CFG, sbx.SandboxSpec()) for _ in range(BATCH)]
        await asyncio.gather(*(b.start() for b in batch))
        await asyncio.gather(*(b.exec("true") for b in batch))
        boxes += batch
    many = time.perf_counter() - t
    live = nfd()
    rounds = await exec_rounds(boxes) if EXECS else None
    t = time.perf_counter()
    if EXECS:
        # All at once, each failure counted: the scale run's mass stop.
        res = await asyncio.gather(*(b.stop() for b in boxes), return_exceptions=True)
        stop_fail = [r for r in res if isinstance(r, BaseException)]
    else:
        stop_fail = []
        for i in range(0, len(boxes), BATCH):
            await asyncio.gather(*(b.stop() for b in boxes[i:i + BATCH]))
    stop = time.perf_counter() - t
    print(f"bench_python_boxes: linux provider, AsyncSandbox({CFG}) per box, from Python")
    print(f"  1 box create+exec:           {one * 1e3:8.1f} ms")
    print(f"  100 boxes at once:           {hundred * 1e3:8.1f} ms ({hundred / 100 * 1e3:.1f} ms/box)")
    print(f"  {len(boxes)} boxes, batches of {BATCH}:  {many:8.2f} s ({len(boxes) / many:.0f}/s), "
          f"stop {stop:.2f} s{' (all at once)' if EXECS else ''}")
    print(f"  descriptors with {len(boxes)} live: {live} ({(live - base) / len(boxes):.2f} per box over {base}), "
          f"soft limit {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
    if rounds:
        n, dt, fails, first = rounds
        print(f"  {EXECS} x exec('true') on each of {len(boxes)} boxes ({INFLIGHT} in flight): "
              f"{n} execs in {dt:.1f} s ({n / dt:.0f}/s), {fails} failed{'; first: ' + first if first else ''}")
        print(f"  stop of all {len(boxes)} at once: {len(boxes) - len(stop_fail)} of {len(boxes)} succeeded"
              f"{'; first failure: ' + str(stop_fail[0]) if stop_fail else ''}")


async def exec_rounds(boxes: list) -> tuple[int, float, int, str]:
    """EXECS rounds of exec("true") on every box, INFLIGHT at once; failures counted."""
    sem = asyncio.Semaphore(INFLIGHT)
    fails, first = 0, ""

    async def one(b) -> None:
        nonlocal fails, first
        async with sem:
            try:
                r = await b.exec("true")
                ok, why = r.return_code == 0, f"return code {r.return_code} ({r.error_type})"
            except Exception as e:  # noqa: BLE001 - every failure is counted, none hidden
                ok, why = False, repr(e)
            if not ok:
                fails += 1
                first = first or why

    t = time.perf_counter()
    for _ in range(EXECS):
        await asyncio.gather(*(one(b) for b in boxes))
    return EXECS * len(boxes), time.perf_counter() - t, fails, first


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft > 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    asyncio.run(main())
