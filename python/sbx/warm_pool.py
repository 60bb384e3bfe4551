"""Warm pools: boxes of one spec started ahead of need (docs/scale.md,
"Warm pools").

A thin wrapper over the C `sbx_warm_pool` (src/core/warm_pool.c): the pool,
its refills, the stale-box and failure rules are C's alone. A claim hands
out a started box as a `Sandbox` (or, from `aclaim`, an `AsyncSandbox`)
that the caller uses and stops as if it had started it.

    pool = WarmPool({"linux": {}}, SandboxSpec(image="python:3.12"), size=8)
    with pool.claim() as box:          # already running
        box.exec("python3 -c 'print(1)'")
    pool.close()                       # stops the boxes not claimed
"""

from __future__ import annotations

import asyncio
import threading
from ctypes import byref, c_uint, c_ulonglong, c_void_p
from typing import Any, Mapping

from . import _lib
from ._lib import lib
from .api import AsyncSandbox, Sandbox, _c_provider
from .base import SandboxSpec
from .cprovider import CProvider, CSandbox, spec_to_c


class WarmPool:
    """Keeps `size` (1 to 4096) boxes of `spec` started on a C provider."""

    def __init__(self, provider: Mapping[str, Any] | Any, spec: SandboxSpec | None = None, size: int = 4) -> None:
        self._provider = _c_provider(provider)
        if not isinstance(self._provider, CProvider):
            raise TypeError("WarmPool runs on a C provider (built in, or a C plugin); "
                            f"{type(self._provider).__name__} is a Python provider")
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"size must be an int, not {type(size).__name__}")
        self._spec = spec
        self._lock = threading.Lock()
        cspec = spec_to_c(spec) if spec is not None else c_void_p()
        ptr = c_void_p()
        try:
            _lib.call(lib.sbx_warm_pool_new, self._provider._ptr, cspec, c_uint(max(0, min(size, 1 << 31))),
                      byref(ptr))
        finally:
            lib.sbx_spec_free(cspec)
        self._ptr: c_void_p | None = ptr

    def _live(self) -> c_void_p:
        if not self._ptr:
            raise RuntimeError("the warm pool is closed")
        return self._ptr

    def _claim_csb(self) -> CSandbox:
        ptr = self._live()
        sb = c_void_p()
        _lib.call(lib.sbx_warm_pool_claim, ptr, byref(sb))
        return CSandbox(sb, self._provider)

    def claim(self) -> Sandbox:
        """A started Sandbox: one of the pool's at once when it has one ready."""
        return Sandbox._from_async(AsyncSandbox._from_csb(self._provider, self._claim_csb(), self._spec))

    async def aclaim(self) -> AsyncSandbox:
        """claim() for asyncio: the (possibly waiting) claim runs on a worker thread."""
        csb = await asyncio.to_thread(self._claim_csb)
        return AsyncSandbox._from_csb(self._provider, csb, self._spec)

    def stats(self) -> dict[str, int]:
        """Boxes ready and starting now; claims so far, and those a ready box served."""
        ready, starting = c_uint(), c_uint()
        claims, hits = c_ulonglong(), c_ulonglong()
        lib.sbx_warm_pool_stats(self._live(), byref(ready), byref(starting), byref(claims), byref(hits))
        return {"ready": ready.value, "starting": starting.value, "claims": claims.value, "hits": hits.value}

    def last_error(self) -> BaseException | None:
        """The last background start that failed, as the exception it would raise, or None."""
        err = c_void_p(lib.sbx_warm_pool_last_error(self._live()))
        if not err.value:
            return None
        return _lib.take_error(lib.sbx_error_code(err), err)

    def close(self) -> None:
        """Stops every box not claimed and frees the pool. Idempotent."""
        with self._lock:
            ptr, self._ptr = self._ptr, None
        if ptr:
            lib.sbx_warm_pool_free(ptr)

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
