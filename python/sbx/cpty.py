"""PTY sessions of C providers (sbx_pty_* in include/sbx.h, docs/terminals.md)
behind the reference's SandboxPtySession protocol. A session holds its own
connection to the box's agent; its blocking C calls run in worker threads,
one at a time per session (the C handle is not thread-safe), in short slices
so that read(), read_stderr() and wait_exit() awaited together all progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import threading
import time
from collections.abc import AsyncIterator, Iterator
from ctypes import POINTER, byref, c_char_p, c_double, c_int, c_size_t, c_uint, c_ulonglong, c_void_p
from typing import Any, Callable

from . import _lib
from ._lib import lib
from .base import SandboxExecResult, SandboxPtyError, SandboxPtySpec

_P, _PP, _ERR = c_void_p, POINTER(c_void_p), POINTER(c_void_p)
for _name, _res, _args in [
    ("sbx_pty_opts_new", _P, ()),
    ("sbx_pty_opts_free", None, (_P,)),
    ("sbx_pty_opts_set_command", c_int, (_P, c_char_p)),
    ("sbx_pty_opts_set_cwd", c_int, (_P, c_char_p)),
    ("sbx_pty_opts_set_user", c_int, (_P, c_char_p)),
    ("sbx_pty_opts_set_env", c_int, (_P, c_char_p, c_char_p)),
    ("sbx_pty_opts_set_size", c_int, (_P, c_uint, c_uint)),
    ("sbx_pty_opts_set_pipes", c_int, (_P, c_int)),
    ("sbx_pty_open", c_int, (_P, _P, _PP, _ERR)),
    ("sbx_pty_attach", c_int, (_P, c_uint, c_int, c_ulonglong, _PP, _ERR)),
    ("sbx_pty_id", c_uint, (_P,)),
    ("sbx_pty_read", c_int, (_P, c_int, c_char_p, c_size_t, c_double, POINTER(c_size_t), POINTER(c_ulonglong), _ERR)),
    ("sbx_pty_write", c_int, (_P, c_char_p, c_size_t, _ERR)),
    ("sbx_pty_resize", c_int, (_P, c_uint, c_uint, _ERR)),
    ("sbx_pty_signal", c_int, (_P, c_char_p, _ERR)),
    ("sbx_pty_wait", c_int, (_P, c_double, POINTER(c_int), _ERR)),
    ("sbx_pty_close", c_int, (_P, _ERR)),
    ("sbx_pty_free", None, (_P,)),
    ("sbx_pty_closed", c_int, (_P,)),
    ("sbx_proc_run_detached", c_int, (_P, c_char_p, c_double, c_double, _PP, POINTER(c_size_t), POINTER(c_int), _ERR)),
    ("sbx_pty_exec_opts_new", _P, ()),
    ("sbx_pty_exec_opts_free", None, (_P,)),
    ("sbx_pty_exec_opts_set_session", c_int, (_P, _P)),
    ("sbx_pty_exec_opts_set_cwd", c_int, (_P, c_char_p)),
    ("sbx_pty_exec_opts_set_user", c_int, (_P, c_char_p)),
    ("sbx_pty_exec_opts_set_env", c_int, (_P, c_char_p, c_char_p)),
    ("sbx_pty_exec_opts_set_env_given", c_int, (_P,)),
    ("sbx_pty_exec_opts_set_size", c_int, (_P, c_uint, c_uint)),
    ("sbx_pty_exec_opts_set_pipes", c_int, (_P, c_int)),
    ("sbx_pty_exec_opts_set_timeout", c_int, (_P, c_double)),
    ("sbx_sandbox_pty_exec", c_int, (_P, c_char_p, _P, _PP, _ERR)),
]:
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = list(_args)

_SLICE = 0.05  # seconds one C call may hold the session's lock


def _run_detached(sb: c_void_p, command: bytes | None, poll_interval_s: float) -> tuple[bytes, int]:
    out = c_void_p()
    n = c_size_t(0)
    code = c_int(0)
    _lib.call(lib.sbx_proc_run_detached, sb, command, poll_interval_s, -1.0, byref(out), byref(n), byref(code))
    try:
        return ctypes.string_at(out, n.value), code.value
    finally:
        lib.sbx_free(out)


@contextlib.contextmanager
def pty_opts(
    command: str | None,
    cwd: str | None,
    user: str | int | None,
    env: dict[str, str] | None,
    size: tuple[int, int] | None = None,
    pipes: bool = False,
) -> Iterator[c_void_p]:
    """A C `sbx_pty_opts` for a session or a background process, freed on exit."""
    o = lib.sbx_pty_opts_new()
    if not o:
        raise MemoryError("out of memory")
    try:
        if command is not None:
            _lib.check(lib.sbx_pty_opts_set_command(o, _lib.cstr(command, "command")), c_void_p())
        if cwd is not None:
            _lib.check(lib.sbx_pty_opts_set_cwd(o, _lib.cstr(cwd, "cwd")), c_void_p())
        if user is not None:
            _lib.check(lib.sbx_pty_opts_set_user(o, _lib.cstr(str(user), "user")), c_void_p())
        for k, v in (env or {}).items():
            if lib.sbx_pty_opts_set_env(o, _lib.cstr(k, "an env name"), _lib.cstr(v, f"env[{k!r}]")) < 0:
                raise ValueError(f"env[{k!r}] is not valid: a name is not empty and has no '='")
        if size is not None and lib.sbx_pty_opts_set_size(o, int(size[0]), int(size[1])) < 0:
            raise ValueError(f"rows and cols must be 1..4096, got {size[0]}x{size[1]}")
        if pipes:
            lib.sbx_pty_opts_set_pipes(o, 1)
        yield o
    finally:
        lib.sbx_pty_opts_free(o)


def open_session(box: Callable[[], c_void_p], spec: SandboxPtySpec) -> CPtySession:
    """`box()` gives the sandbox's live pointer (it raises once the sandbox is gone)."""
    sb = box()
    p = c_void_p()
    with pty_opts(spec.command, spec.cwd, spec.user, spec.env, (spec.rows, spec.cols), not spec.pty) as o:
        _lib.call(lib.sbx_pty_open, sb, o, byref(p))
    return CPtySession(p, "pty" if spec.pty else "pipe", box)


def attach_session(box: Callable[[], c_void_p], session_id: str, takeover: bool, since: int | None) -> CPtySession:
    try:
        sid = int(session_id)
    except (TypeError, ValueError):
        raise SandboxPtyError(f"no PTY session {session_id!r} in this box") from None
    if not 0 < sid < 1 << 32:
        raise SandboxPtyError(f"no PTY session {session_id!r} in this box")
    p = c_void_p()
    _lib.call(lib.sbx_pty_attach, box(), sid, 1 if takeover else 0, int(since or 0), byref(p))
    return CPtySession(p, "pty", box)


class CPtySession:
    """One PTY session of a C provider (SandboxPtySession)."""

    def __init__(self, ptr: c_void_p, mode: str, box: Callable[[], c_void_p] | None = None) -> None:
        self._ptr = ptr
        self._box = box  # the sandbox's live pointer, for run_detached
        self._lock = threading.Lock()
        self.session_id = str(lib.sbx_pty_id(ptr))
        self.mode: str | None = mode
        self._closed = False

    @property
    def closed(self) -> bool:
        # The C facade closes a default session whose command timed out (item 50).
        return self._closed or bool(self._ptr and lib.sbx_pty_closed(self._ptr))

    def _live(self) -> c_void_p:
        if self._closed or not self._ptr:
            raise SandboxPtyError(f"PTY session {self.session_id} is closed")
        return self._ptr

    async def run_detached(self, command: str, *, poll_interval_s: float = 15.0) -> tuple[bytes, int | None]:
        """The newer reference's run_detached: `command` runs in the box as a
        background process, with no connection held while it runs but one
        brief poll each `poll_interval_s`; returns its output (stderr merged)
        and exit status. More output than the box keeps for it (1 MiB) raises
        SandboxPtyError instead of a cut result. sbx_proc_run_detached owns
        the rules (include/sbx.h)."""
        if self._box is None:
            raise SandboxPtyError("run_detached needs the session's sandbox")
        sb = self._box()
        cmd = _lib.cstr(command, "command")
        return await asyncio.to_thread(_run_detached, sb, cmd, float(poll_interval_s))

    def _read_slice(self, stream: int, timeout: float) -> bytes | None:
        return _lib.read_slice(lib.sbx_pty_read, self._lock, self._live, stream, timeout)

    async def _read(self, stream: int, timeout_s: float | None) -> bytes:
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, float(timeout_s))
        while True:
            left = _SLICE if deadline is None else min(_SLICE, max(0.0, deadline - time.monotonic()))
            data = await asyncio.to_thread(self._read_slice, stream, left)
            if data is not None:
                return data
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"PTY session {self.session_id}: no output within {timeout_s}s")

    async def read(self, *, timeout_s: float | None = None) -> bytes:
        """The next output bytes (b"" once the session ended and all was read)."""
        return await self._read(1, timeout_s)

    async def read_stderr(self, *, timeout_s: float | None = None) -> bytes:
        """The next stderr bytes of a pipe-mode session (b"" at its end; always b"" for a PTY)."""
        if self.mode == "pty":
            return b""
        return await self._read(2, timeout_s)

    async def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[override]
        while True:
            chunk = await self.read()
            if not chunk:
                return
            yield chunk

    def _locked(self, fn: Any, *args: Any) -> None:
        err = c_void_p()
        with self._lock:
            rc = fn(self._live(), *args, byref(err))
        _lib.check(rc, err)

    async def write(self, data: bytes) -> None:
        data = bytes(data)
        await asyncio.to_thread(self._locked, lib.sbx_pty_write, data, len(data))

    async def resize(self, rows: int, cols: int) -> None:
        await asyncio.to_thread(self._locked, lib.sbx_pty_resize, int(rows), int(cols))

    async def send_signal(self, signal: str) -> None:
        await asyncio.to_thread(self._locked, lib.sbx_pty_signal, _lib.cstr(signal, "signal"))

    def _wait_slice(self, timeout: float) -> int | None:
        return _lib.wait_slice(lib.sbx_pty_wait, self._lock, self._live, timeout)

    async def wait_exit(self, *, timeout_s: float | None = None) -> int:
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, float(timeout_s))
        while True:
            left = _SLICE if deadline is None else min(_SLICE, max(0.0, deadline - time.monotonic()))
            code = await asyncio.to_thread(self._wait_slice, left)
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"PTY session {self.session_id} did not end within {timeout_s}s")

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ptr, self._ptr = self._ptr, c_void_p()
        if ptr:
            lib.sbx_pty_close(ptr, None)

    async def close(self) -> None:
        """Ends a session this handle opened; only detaches an attached one. Idempotent."""
        await asyncio.to_thread(self._close)

    async def __aenter__(self) -> CPtySession:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.close()

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr and lib is not None:
            lib.sbx_pty_free(ptr)  # the session runs on, detached
            self._ptr = c_void_p()


def pty_exec(
    sb: c_void_p,
    command: str,
    session: CPtySession | None,
    cwd: str | None,
    env: dict[str, str] | None,
    timeout_s: float | None,
    user: str | int | None,
    rows: int,
    cols: int,
    pty: bool,
) -> SandboxExecResult:
    """sbx_sandbox_pty_exec (blocking: run it in a worker thread): the
    reference's pty.exec rules, written once in src/core/pty_exec.c."""
    o = lib.sbx_pty_exec_opts_new()
    if not o:
        raise MemoryError("out of memory")
    try:
        if cwd is not None:
            _lib.check(lib.sbx_pty_exec_opts_set_cwd(o, _lib.cstr(cwd, "cwd")), c_void_p())
        if user is not None:
            _lib.check(lib.sbx_pty_exec_opts_set_user(o, _lib.cstr(str(user), "user")), c_void_p())
        if env is not None:
            lib.sbx_pty_exec_opts_set_env_given(o)
            for k, v in env.items():
                if lib.sbx_pty_exec_opts_set_env(o, _lib.cstr(k, "an env name"), _lib.cstr(v, f"env[{k!r}]")) < 0:
                    raise ValueError(f"env[{k!r}] is not valid: a name is not empty and has no '='")
        if (int(rows), int(cols)) != (24, 80) and lib.sbx_pty_exec_opts_set_size(o, int(rows), int(cols)) < 0:
            raise ValueError(f"rows and cols must be 1..4096, got {rows}x{cols}")
        lib.sbx_pty_exec_opts_set_pipes(o, 0 if pty else 1)
        if lib.sbx_pty_exec_opts_set_timeout(o, -1.0 if timeout_s is None else float(timeout_s)) < 0:
            raise ValueError(f"timeout_s must be a finite number of seconds up to 1e9, got {timeout_s!r}")
        held = None
        if session is not None:
            held = session._live()
            lib.sbx_pty_exec_opts_set_session(o, held)
        r = c_void_p()
        err = c_void_p()
        # The session's own lock: no other call of this process uses its C handle
        # meanwhile. Its wait counts against the timeout, as C's lock's does.
        if session is not None:
            if not session._lock.acquire(timeout=-1 if timeout_s is None else max(0.0, float(timeout_s))):
                return SandboxExecResult(
                    stdout=None,
                    stderr=f"PTY command timed out after {timeout_s}s: {command!r}; the command is still "
                    "running and the session should be discarded",
                    return_code=125,
                    error_type="timeout",
                )
            try:
                rc = lib.sbx_sandbox_pty_exec(sb, _lib.cstr(command, "command"), o, byref(r), byref(err))
            finally:
                session._lock.release()
        else:
            rc = lib.sbx_sandbox_pty_exec(sb, _lib.cstr(command, "command"), o, byref(r), byref(err))
        _lib.check(rc, err)
    finally:
        lib.sbx_pty_exec_opts_free(o)
    return _lib.exec_result_from(r)
