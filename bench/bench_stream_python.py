#!/usr/bin/env python3
"""Streaming from Python on a warm linux box: the two ways the binding could
take chunks from libsbx, measured side by side.

  pipes      what sbx.stream does: the library writes each stream into a pipe
             (sbx_exec_opts_set_output_fd), asyncio watches it (add_reader)
  ctypes cb  an output callback through ctypes: runs on the sbx loop thread,
             takes the GIL per chunk, hands the bytes over with
             call_soon_threadsafe (not used: the loop thread serves every box
             of the process and would wait for the GIL)

Rows: p50 of N small execs (`echo hello`), and 16 MB through each path.

    SBX_LIB=build/libsbx.so PYTHONPATH=python python3 bench/bench_stream_python.py [N]
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import sbx  # noqa: E402
from sbx import _lib  # noqa: E402
from sbx._lib import lib  # noqa: E402
from sbx.cprovider import _box, exec_opts  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
BIG = 16_000_000
CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
lib.sbx_exec_opts_set_output_cb.argtypes = [ctypes.c_void_p, CB, ctypes.c_void_p]
lib.sbx_exec_opts_set_output_cb.restype = ctypes.c_int


async def main() -> None:
    async with sbx.AsyncSandbox({"linux": {}}, sbx.SandboxSpec()) as sb:
        await sb.start()
        for _ in range(20):
            await sb.exec("true")
        loop = asyncio.get_running_loop()
        got: list[bytes] = []

        @CB
        def cb(stream, data, n, user):  # noqa: ANN001
            b = ctypes.string_at(data, n)
            loop.call_soon_threadsafe(got.append, b)

        async def via_cb(cmd: bytes, keep: int = 1) -> None:
            o = exec_opts(None, None, 180, None)
            lib.sbx_exec_opts_set_output_cb(o, cb, None)
            lib.sbx_exec_opts_set_keep_output(o, keep)
            f = _lib.submit(lib.sbx_sandbox_exec_async, _box(sb._require_handle()), cmd, o)
            lib.sbx_exec_opts_free(o)
            await _lib.await_future(f, _lib.TAKE_EXEC)
            await asyncio.sleep(0)

        def p50(xs: list[float]) -> str:
            return f"{statistics.median(xs) * 1e3:8.3f}"

        rows = []
        for label, run in (
            ("exec echo (one-shot)", lambda: sb.exec("echo hello")),
            ("exec_stream echo (pipes)", lambda: sb.exec_stream("echo hello")),
            ("echo, ctypes callback", lambda: via_cb(b"echo hello")),
        ):
            xs = []
            for _ in range(N):
                t = time.perf_counter()
                await run()
                xs.append(time.perf_counter() - t)
            rows.append((label, p50(xs) + " ms p50"))
        t = time.perf_counter()
        total = 0
        async for _s, c in sb.exec_stream(f"head -c {BIG} /dev/zero", keep_output=False):
            total += len(c)
        dt = time.perf_counter() - t
        rows.append((f"{BIG // 1_000_000} MB, pipes", f"{dt * 1e3:8.1f} ms ({total / dt / 1e6:.0f} MB/s)"))
        got.clear()
        t = time.perf_counter()
        await via_cb(f"head -c {BIG} /dev/zero".encode(), 0)
        dt = time.perf_counter() - t
        total = sum(map(len, got))
        rows.append((f"{BIG // 1_000_000} MB, ctypes callback", f"{dt * 1e3:8.1f} ms ({total / dt / 1e6:.0f} MB/s)"))
    print(f"\n# bench_stream_python: warm linux box, {N} runs")
    for label, v in rows:
        print(f"  {label:34s} {v}")


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("\n# bench_stream_python: skipped (linux boxes need root)")
        sys.exit(0)
    asyncio.run(main())
