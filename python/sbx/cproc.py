"""Background processes of C providers (sbx_proc_* in include/sbx.h,
docs/terminals.md "Background processes"): a command started in the box's
agent with pipes, which outlives its handle and can be attached again, from
this process or another, by its id.

`Process` is the blocking handle (what `Sandbox.spawn` returns);
`AsyncProcess` runs the same C calls in worker threads in short slices, so
that reads of both streams and a wait awaited together all progress (what
`AsyncSandbox.spawn` returns). Each handle's C calls are serialized by a lock
(the C handle is one thread at a time). The rules (what ends a process, what
a read returns, the bounds) are the C library's; this module only maps them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from ctypes import POINTER, byref, c_char_p, c_double, c_int, c_size_t, c_uint, c_ulonglong, c_void_p
from typing import Any

from . import _lib
from ._lib import lib
from .cpty import pty_opts  # declares the sbx_pty_opts_* prototypes

_P, _PP, _ERR = c_void_p, POINTER(c_void_p), POINTER(c_void_p)
for _name, _res, _args in [
    ("sbx_proc_start", c_int, (_P, _P, _PP, _ERR)),
    ("sbx_proc_attach", c_int, (_P, c_uint, c_uint, c_ulonglong, _PP, _ERR)),
    ("sbx_proc_id", c_uint, (_P,)),
    ("sbx_proc_write", c_int, (_P, c_char_p, c_size_t, _ERR)),
    ("sbx_proc_close_stdin", c_int, (_P, _ERR)),
    ("sbx_proc_read", c_int, (_P, c_int, c_char_p, c_size_t, c_double, POINTER(c_size_t), POINTER(c_ulonglong), _ERR)),
    ("sbx_proc_wait", c_int, (_P, c_double, POINTER(c_int), _ERR)),
    ("sbx_proc_signal", c_int, (_P, c_char_p, _ERR)),
    ("sbx_proc_detach", c_int, (_P, _ERR)),
    ("sbx_proc_free", None, (_P,)),
    ("sbx_proc_list", c_int, (_P, POINTER(c_void_p), _ERR)),
    ("sbx_sandbox_top", c_int, (_P, POINTER(c_void_p), _ERR)),
    ("sbx_sandbox_stats", c_int, (_P, POINTER(c_void_p), _ERR)),
]:
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = list(_args)

_SLICE = 0.05  # seconds one C call may hold the handle's lock (async handles)
_TAKEOVER, _KEEP = 1, 2
_STREAMS = {"stdout": 1, "stderr": 2}
# What `stdout`/`stderr` keep of what was read (the newest bytes).
SEEN_LIMIT = 16 << 20


def _stream(stream: str) -> int:
    try:
        return _STREAMS[stream]
    except KeyError:
        raise ValueError(f"stream must be 'stdout' or 'stderr', got {stream!r}") from None


def start(sb: c_void_p, command: str, cwd: str | None, env: dict[str, str] | None, user: str | int | None) -> c_void_p:
    p = c_void_p()
    with pty_opts(command, cwd, user, env, pipes=False) as o:
        _lib.call(lib.sbx_proc_start, sb, o, byref(p))
    return p


def attach(sb: c_void_p, pid: int | str, takeover: bool, keep: bool, since: int) -> c_void_p:
    n = int(pid)
    if not 0 < n < 1 << 32:
        raise ValueError(f"a process id is 1..2^32-1, got {pid!r}")
    p = c_void_p()
    _lib.call(lib.sbx_proc_attach, sb, n, (_TAKEOVER if takeover else 0) | (_KEEP if keep else 0), int(since), byref(p))
    return p


def _json_call(fn: Any, sb: c_void_p) -> Any:
    out = c_void_p()
    _lib.call(fn, sb, byref(out))
    try:
        return json.loads(c_char_p(out.value).value or b"null")
    finally:
        lib.sbx_free(out)


def list_processes(sb: c_void_p) -> list[dict[str, Any]]:
    """The box's sessions and background processes (sbx_proc_list)."""
    return _json_call(lib.sbx_proc_list, sb)


def stats(sb: c_void_p) -> dict[str, Any]:
    """What the box uses now (sbx_sandbox_stats): cpu_ns, memory_bytes, memory_limit,
    pids, pids_limit (None where unknown or unlimited)."""
    return _json_call(lib.sbx_sandbox_stats, sb)


def top(sb: c_void_p) -> dict[str, Any]:
    """The box's processes (sbx_sandbox_top): {"processes": [...], "truncated": bool}."""
    return _json_call(lib.sbx_sandbox_top, sb)


class Process:
    """A background process in a box (blocking handle). `id` is its number in
    the box: `sandbox.attach_process(id)` (any process) or `sbx attach BOX id`
    comes back to it. Dropping the handle lets the process run on."""

    def __init__(self, ptr: c_void_p) -> None:
        self._ptr = ptr
        self._lock = threading.Lock()
        self.id = int(lib.sbx_proc_id(ptr))
        self._seen = {1: bytearray(), 2: bytearray()}
        self._code: int | None = None

    def _live(self) -> c_void_p:
        if not self._ptr:
            raise RuntimeError(f"background process {self.id}: this handle is closed")
        return self._ptr

    def _call(self, fn: Any, *args: Any) -> None:
        err = c_void_p()
        with self._lock:
            rc = fn(self._live(), *args, byref(err))
        _lib.check(rc, err)

    # --- stdin ---
    def write(self, data: bytes | str) -> None:
        """Writes to the process's stdin (str is sent as UTF-8)."""
        b = data.encode() if isinstance(data, str) else bytes(data)
        if b:
            self._call(lib.sbx_proc_write, b, len(b))

    send_stdin = write

    def close_stdin(self) -> None:
        """Closes its stdin: the command reads EOF."""
        self._call(lib.sbx_proc_close_stdin)

    # --- output ---
    def _read_once(self, k: int, timeout: float) -> bytes | None:
        data = _lib.read_slice(lib.sbx_proc_read, self._lock, self._live, k, timeout)
        if data is None:
            return None
        seen = self._seen[k]
        seen += data
        if len(seen) > SEEN_LIMIT:
            del seen[: len(seen) - SEEN_LIMIT]
        return data

    def read(self, stream: str = "stdout", timeout_s: float | None = None) -> bytes:
        """The next bytes of `stream`; b"" once the process ended and all was
        read. TimeoutError when nothing came within timeout_s (None: wait)."""
        data = self._read_once(_stream(stream), -1.0 if timeout_s is None else max(0.0, float(timeout_s)))
        if data is None:
            raise TimeoutError(f"background process {self.id}: no {stream} within {timeout_s}s")
        return data

    def _so_far(self, k: int) -> bytes:
        while self._ptr and self._read_once(k, 0.0):
            pass
        return bytes(self._seen[k])

    @property
    def stdout(self) -> bytes:
        """Everything its stdout printed so far that this handle saw (the
        newest 16 MiB), without waiting: what arrived is taken in first."""
        return self._so_far(1)

    @property
    def stderr(self) -> bytes:
        return self._so_far(2)

    # --- end ---
    def _wait_once(self, timeout: float) -> int | None:
        if self._code is not None:
            return self._code
        code = _lib.wait_slice(lib.sbx_proc_wait, self._lock, self._live, timeout)
        if code is not None:
            self._code = code
        return code

    def wait(self, timeout_s: float | None = None) -> int:
        """Waits for the end: the exit status (128+N for a signal N)."""
        code = self._wait_once(-1.0 if timeout_s is None else max(0.0, float(timeout_s)))
        if code is None:
            raise TimeoutError(f"background process {self.id} did not end within {timeout_s}s")
        return code

    def poll(self) -> int | None:
        """The exit status if it ended, else None (does not wait)."""
        return self._wait_once(0.0)

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def signal(self, name: str | int) -> None:
        """Sends a signal ("TERM", "SIGINT", "KILL", a number) to its process group."""
        self._call(lib.sbx_proc_signal, _lib.cstr(str(name), "signal"))

    def kill(self) -> None:
        self.signal("KILL")

    def terminate(self) -> None:
        self.signal("TERM")

    def detach(self) -> None:
        """Lets the process go (it runs on, unheld) and closes this handle."""
        with self._lock:
            ptr, self._ptr = self._ptr, c_void_p()
        if ptr:
            lib.sbx_proc_detach(ptr, None)
            lib.sbx_proc_free(ptr)

    close = detach

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr and lib is not None:
            lib.sbx_proc_free(ptr)  # the process runs on
            self._ptr = c_void_p()


class AsyncProcess:
    """The asyncio form of Process: the same methods, awaited; C calls run in
    worker threads in 50 ms slices, so concurrent awaits all progress."""

    def __init__(self, ptr: c_void_p) -> None:
        self._p = Process(ptr)
        self.id = self._p.id

    async def _sliced(self, once: Any, timeout_s: float | None, what: str) -> Any:
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, float(timeout_s))
        while True:
            left = _SLICE if deadline is None else min(_SLICE, max(0.0, deadline - time.monotonic()))
            got = await asyncio.to_thread(once, left)
            if got is not None:
                return got
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"background process {self.id}: {what} within {timeout_s}s")

    async def write(self, data: bytes | str) -> None:
        await asyncio.to_thread(self._p.write, data)

    send_stdin = write

    async def close_stdin(self) -> None:
        await asyncio.to_thread(self._p.close_stdin)

    async def read(self, stream: str = "stdout", timeout_s: float | None = None) -> bytes:
        k = _stream(stream)
        return await self._sliced(lambda t: self._p._read_once(k, t), timeout_s, f"no {stream}")

    async def stdout(self) -> bytes:
        """Everything its stdout printed so far that this handle saw (no waiting)."""
        return await asyncio.to_thread(self._p._so_far, 1)

    async def stderr(self) -> bytes:
        return await asyncio.to_thread(self._p._so_far, 2)

    async def wait(self, timeout_s: float | None = None) -> int:
        return await self._sliced(self._p._wait_once, timeout_s, "no end")

    async def poll(self) -> int | None:
        return await asyncio.to_thread(self._p.poll)

    @property
    def returncode(self) -> int | None:
        """The exit status once a wait() or poll() saw the end, else None."""
        return self._p._code

    async def signal(self, name: str | int) -> None:
        await asyncio.to_thread(self._p.signal, name)

    async def kill(self) -> None:
        await self.signal("KILL")

    async def terminate(self) -> None:
        await self.signal("TERM")

    async def detach(self) -> None:
        await asyncio.to_thread(self._p.detach)

    close = detach

    async def __aenter__(self) -> AsyncProcess:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.detach()
