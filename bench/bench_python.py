#!/usr/bin/env python3
"""What the Python binding costs over the C API, on the `local` provider.

For each operation it times the C blocking API (called through ctypes: one
foreign call per operation, so this is the C cost plus ~1 us), then
AsyncSandbox (asyncio, futures awaited through their descriptors) and the
blocking Sandbox (a private loop thread), and prints the ratios.

    SBX_LIB=build/libsbx.so PYTHONPATH=python python3 bench/bench_python.py [N]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from ctypes import byref, c_void_p

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import sbx  # noqa: E402
from sbx import _lib  # noqa: E402
from sbx._lib import lib  # noqa: E402
from sbx.cprovider import spec_to_c  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
CREATE_N = max(20, N // 10)
PROVIDER = {os.environ.get("SBX_BENCH_PROVIDER", "local"): {}}

lib.sbx_sandbox_start.argtypes = [c_void_p, c_void_p, c_void_p]
lib.sbx_sandbox_exec.argtypes = [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]
lib.sbx_sandbox_stop.argtypes = [c_void_p, c_void_p]


def per_op(fn, n):
    """Median of 5 batches, in microseconds per operation."""
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        fn(n // 5)
        batches.append((time.perf_counter() - t) / (n // 5) * 1e6)
    return statistics.median(batches)


def c_side(workdir):
    import json

    prov = c_void_p()
    _lib.call(lib.sbx_provider_new, json.dumps(PROVIDER).encode(), byref(prov))
    spec = spec_to_c(sbx.SandboxSpec(workdir=workdir))

    def new_started():
        sb = c_void_p()
        _lib.call(lib.sbx_sandbox_new, prov, spec, byref(sb))
        _lib.check(lib.sbx_sandbox_start(sb, None, None), c_void_p())
        return sb

    sb = new_started()

    def execs(n):
        r = c_void_p()
        for _ in range(n):
            if lib.sbx_sandbox_exec(sb, b"true", None, byref(r), None) != 0:
                raise RuntimeError("exec failed")
            lib.sbx_exec_result_free(r)

    def creates(n):
        for _ in range(n):
            s = new_started()
            lib.sbx_sandbox_stop(s, None)
            lib.sbx_sandbox_free(s)

    out = per_op(execs, N), per_op(creates, CREATE_N)
    lib.sbx_sandbox_free(sb)
    lib.sbx_spec_free(spec)
    lib.sbx_provider_free(prov)
    return out


def async_side(workdir):
    spec = sbx.SandboxSpec(workdir=workdir)

    async def main():
        loop = asyncio.get_running_loop()
        provider = sbx.create_provider(PROVIDER)
        box = await sbx.AsyncSandbox(provider, spec).start()

        async def execs(n):
            for _ in range(n):
                await box.exec("true")

        async def creates(n):
            for _ in range(n):
                s = await sbx.AsyncSandbox(provider, spec).start()
                await s.stop()

        async def timed(fn, n):
            res = []
            for _ in range(5):
                t = loop.time()
                await fn(n // 5)
                res.append((loop.time() - t) / (n // 5) * 1e6)
            return statistics.median(res)

        e = await timed(execs, N)
        c = await timed(creates, CREATE_N)
        t = loop.time()
        await asyncio.gather(*(box.exec("true") for _ in range(N)))
        conc = (loop.time() - t) / N * 1e6
        await box.stop()
        return e, c, conc

    return asyncio.run(main())


def sync_side(workdir):
    spec = sbx.SandboxSpec(workdir=workdir)
    provider = sbx.create_provider(PROVIDER)
    box = sbx.Sandbox(provider, spec).start()

    def execs(n):
        for _ in range(n):
            box.exec("true")

    def creates(n):
        for _ in range(n):
            sbx.Sandbox(provider, spec).start().stop()

    out = per_op(execs, N), per_op(creates, CREATE_N)
    box.stop()
    return out


def main():
    if not _lib.c_provider_exists(next(iter(PROVIDER))):
        print("bench_python: the local provider is not built; nothing to measure")
        return
    with tempfile.TemporaryDirectory(prefix="sbx-bench-") as tmp:
        c_exec, c_create = c_side(tmp)
        a_exec, a_create, a_conc = async_side(tmp)
        s_exec, s_create = sync_side(tmp)
    print(f"bench_python: {next(iter(PROVIDER))} provider, {N} execs of `true`, {CREATE_N} create->ready->stop")
    print(f"{'operation':<26}{'C API':>10}{'AsyncSandbox':>14}{'ratio':>8}{'Sandbox':>10}{'ratio':>8}")
    for name, c, a, s in [("exec round trip (us)", c_exec, a_exec, s_exec),
                          ("create+stop (us)", c_create, a_create, s_create)]:
        print(f"{name:<26}{c:>10.0f}{a:>14.0f}{a / c:>8.2f}{s:>10.0f}{s / c:>8.2f}")
    print(f"AsyncSandbox, {N} concurrent execs: {a_conc:.0f} us per exec (wall / N)")


if __name__ == "__main__":
    main()
