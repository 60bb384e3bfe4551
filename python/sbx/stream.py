"""Streaming exec: a command's stdout and stderr as they arrive.

    async with sandbox.exec_stream("make test") as run:
        async for stream, chunk in run:          # stream is "stdout" or "stderr"
            print(stream, chunk)
    print(run.result.return_code)                # SandboxExecResult, after the loop

    result = await sandbox.exec_stream("make", on_output=cb)   # callback form
    with sync_sandbox.exec_stream("make") as run:              # the blocking twin
        for stream, chunk in run: ...

stdin=: bytes, or a file descriptor / file object streamed as it is read
(sbx_exec_opts_set_stdin_fd; it must stay open until the exec ends). C
providers only.

Chunks are bytes (str with text=True, decoded as UTF-8 across chunk
boundaries, invalid bytes replaced). The bytes of one stream come in order;
stdout and stderr are read through separate pipes, so how chunks of the two
interleave is only roughly the order they were written in.

The result is the one exec() returns: the whole output too (up to the output
limit) unless keep_output=False, which keeps memory flat for long streams
(stdout and stderr are then "" in it, except sbx's own message on a runtime
failure). A timed-out command yields what it wrote before the kill, and its
result is return code 125, error_type "timeout", stdout the partial stdout,
stderr the partial stderr followed by the timeout message.

C providers (linux, local, plugins) stream through libsbx: the output is
written by the library into two pipes (sbx_exec_opts_set_output_fd) watched
with loop.add_reader, so no thread and no Python callback runs on the sbx
loop thread (which would hold the GIL for every box). A consumer that does
not keep up is not buffered without bound: past 64 queued chunks the pipes are
no longer read, the library stops reading the command's output, and the
command blocks writing. Python providers, which have no streaming, yield
their whole output when the command ends (the same as the C core does for a
C provider without SBX_CAP_EXEC_STREAM).

Leaving the iteration early (break, an exception, aclose(), the `with`
block) cancels the command: what it started is killed before control
returns.
"""

from __future__ import annotations

import asyncio
import codecs
import fcntl
import inspect
import os
import selectors
from collections import deque
from collections.abc import Callable
from ctypes import c_char_p, c_int, c_size_t, c_void_p
from typing import Any

from . import _lib
from ._lib import lib
from .base import SandboxExecResult

STDOUT = "stdout"
STDERR = "stderr"

_READ = 256 * 1024
_PIPE_SIZE = 256 * 1024
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_QUEUE_HIGH = 64  # chunks queued before the pipes are no longer read
_QUEUE_LOW = 16

lib.sbx_exec_opts_set_output_fd.restype = c_int
lib.sbx_exec_opts_set_output_fd.argtypes = [c_void_p, c_int, c_int]
lib.sbx_exec_opts_set_keep_output.restype = c_int
lib.sbx_exec_opts_set_keep_output.argtypes = [c_void_p, c_int]
lib.sbx_exec_opts_set_stdin_fd.restype = c_int
lib.sbx_exec_opts_set_stdin_fd.argtypes = [c_void_p, c_int]
lib.sbx_exec_opts_set_stdin.restype = c_int
lib.sbx_exec_opts_set_stdin.argtypes = [c_void_p, c_char_p, c_size_t]

Chunk = tuple[str, Any]  # (STDOUT or STDERR, bytes or str)
OutputCallback = Callable[[str, Any], Any]


class _Decoder:
    """bytes -> the chunk type (bytes, or str decoded across boundaries)."""

    def __init__(self, text: bool) -> None:
        self.text = text
        self._dec = {s: codecs.getincrementaldecoder("utf-8")(errors="replace") for s in (STDOUT, STDERR)}

    def feed(self, stream: str, data: bytes, final: bool = False) -> Any:
        if not self.text:
            return data
        return self._dec[stream].decode(data, final)


def _stdin_fd(stdin: Any) -> int | None:
    """A descriptor to stream stdin from, or None for bytes / no stdin."""
    if stdin is None or isinstance(stdin, (bytes, bytearray, memoryview)):
        return None
    if isinstance(stdin, int):
        return stdin
    if hasattr(stdin, "fileno"):
        return stdin.fileno()
    raise TypeError(f"stdin must be bytes, a file descriptor or a file object, got {type(stdin).__name__}")


def _c_start(sandbox: Any, command: str, cwd: Any, env: Any, timeout_s: Any, user: Any, keep_output: bool,
             stdin: Any = None):
    """Starts the exec on a C provider with its output going to two pipes.
    Returns (future, {read_fd: stream}, [write fds]); the write ends stay
    open until the future completes (the library writes to them until then)."""
    from .cprovider import _box, exec_opts  # late: cprovider imports api, api imports us

    box = _box(sandbox._require_handle())
    fds: list[int] = []
    try:
        r_out, w_out = os.pipe()
        fds += [r_out, w_out]
        r_err, w_err = os.pipe()
        fds += [r_err, w_err]
        for fd in (r_out, r_err):
            os.set_blocking(fd, False)
            try:  # bigger pipes: fewer wake-ups per MiB (the default is 64 KiB)
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
            except OSError:
                pass
        opts = exec_opts(cwd, env, timeout_s, user)
        try:
            _lib.check(lib.sbx_exec_opts_set_output_fd(opts, 1, w_out), c_void_p())
            _lib.check(lib.sbx_exec_opts_set_output_fd(opts, 2, w_err), c_void_p())
            _lib.check(lib.sbx_exec_opts_set_keep_output(opts, 1 if keep_output else 0), c_void_p())
            fd = _stdin_fd(stdin)
            if fd is not None:
                _lib.check(lib.sbx_exec_opts_set_stdin_fd(opts, fd), c_void_p())
            elif stdin is not None:
                data = bytes(stdin)
                _lib.check(lib.sbx_exec_opts_set_stdin(opts, data, len(data)), c_void_p())
            f = _lib.submit(lib.sbx_sandbox_exec_async, box, _lib.cstr(command, "the command"), opts)
        finally:
            lib.sbx_exec_opts_free(opts)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return f, {r_out: STDOUT, r_err: STDERR}, [w_out, w_err]


def _is_c(sandbox: Any) -> bool:
    from .cprovider import CProvider, _CSandbox

    handle = sandbox._require_handle()
    return isinstance(sandbox._provider, CProvider) and isinstance(getattr(handle, "raw", None), _CSandbox)


def _whole(result: SandboxExecResult, dec: _Decoder) -> list[Chunk]:
    """A non-streaming provider's output as chunks (none for a runtime failure's message)."""
    if result.error_type is not None:
        return []
    out: list[Chunk] = []
    for stream, text in ((STDOUT, result.stdout), (STDERR, result.stderr)):
        if text:
            data = text.encode("utf-8", "surrogateescape")
            out.append((stream, text if dec.text else data))
    return out


def _strip(result: SandboxExecResult) -> SandboxExecResult:
    """keep_output=False for a provider that kept it anyway."""
    if result.error_type is not None:
        return SandboxExecResult("", result.stderr, result.return_code, result.error_type)
    return SandboxExecResult("", "", result.return_code, result.error_type)


class _StreamBase:
    """What ExecStream and SyncExecStream both hold: the command's arguments,
    the decoder, the output options and the chunks read but not yet taken."""

    def __init__(
        self,
        command: str,
        *,
        cwd: Any,
        env: Any,
        timeout_s: Any,
        user: Any,
        text: bool = False,
        keep_output: bool = True,
        on_output: OutputCallback | None = None,
        stdin: Any = None,
    ) -> None:
        self._stdin = stdin
        self._args = (command, cwd, env, timeout_s, user)
        self._dec = _Decoder(text)
        self._keep = keep_output
        self._on_output = on_output
        self.result: SandboxExecResult | None = None
        """The SandboxExecResult, once the iteration ended (None before)."""
        self._started = False
        self._finished = False
        self._queue: deque[Chunk] = deque()
        self._readers: dict[int, str] = {}
        self._writers: list[int] = []


class ExecStream(_StreamBase):
    """An exec in progress: an async iterator of (stream, chunk), awaitable
    for its result (calling on_output per chunk), an async context manager
    that cancels the command when left early. Made by AsyncSandbox.exec_stream."""

    def __init__(self, sandbox: Any, command: str, **kw: Any) -> None:
        super().__init__(command, **kw)
        self._sandbox = sandbox
        self._error: BaseException | None = None
        # C path
        self._task: asyncio.Future[SandboxExecResult] | None = None
        self._paused = False
        self._wake: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Python providers
        self._py_task: asyncio.Future[SandboxExecResult] | None = None

    # --- starting --------------------------------------------------------

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        command, cwd, env, timeout_s, user = self._args
        if _is_c(self._sandbox):
            f, self._readers, self._writers = _c_start(
                self._sandbox, command, cwd, env, timeout_s, user, self._keep, self._stdin
            )
            self._task = asyncio.ensure_future(_lib.await_future(f, _lib.TAKE_EXEC))
            self._task.add_done_callback(self._exec_done)
            for fd, stream in self._readers.items():
                self._loop.add_reader(fd, self._readable, fd, stream)
        else:
            if self._stdin is not None:
                raise TypeError(f"provider {self._sandbox._provider.name!r} takes no stdin (a Python provider)")
            self._py_task = asyncio.ensure_future(self._sandbox.exec(command, cwd=cwd, env=env, timeout_s=timeout_s, user=user))

    def _exec_done(self, _task: Any) -> None:
        # The library writes no more: the readers drain what is in the pipes, then see EOF.
        for fd in self._writers:
            os.close(fd)
        self._writers = []
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _readable(self, fd: int, stream: str) -> None:
        try:
            data = os.read(fd, _READ)
        except BlockingIOError:
            return
        except OSError as exc:  # not expected from a pipe we own; end this stream
            self._error = self._error or exc
            data = b""
        if data:
            chunk = self._dec.feed(stream, data)
            if chunk:
                self._queue.append((stream, chunk))
            if len(self._queue) >= _QUEUE_HIGH and not self._paused:
                self._paused = True
                for rfd in self._readers:
                    self._loop.remove_reader(rfd)
        else:
            self._loop.remove_reader(fd)
            del self._readers[fd]
            os.close(fd)
            tail = self._dec.feed(stream, b"", True)
            if tail:
                self._queue.append((stream, tail))
        self._poke()

    def _resume(self) -> None:
        if self._paused and len(self._queue) <= _QUEUE_LOW:
            self._paused = False
            for fd, stream in self._readers.items():
                self._loop.add_reader(fd, self._readable, fd, stream)

    # --- iterating -------------------------------------------------------

    def __aiter__(self) -> ExecStream:
        return self

    async def __anext__(self) -> Chunk:
        self._start()
        while True:
            if self._queue:
                item = self._queue.popleft()
                self._resume()
                return item
            if self._finished:
                raise StopAsyncIteration
            if self._py_task is not None:
                result = await self._py_task
                self._queue.extend(_whole(result, self._dec))
                self._finish(_strip(result) if not self._keep else result)
                continue
            if not self._readers and self._task is not None and self._task.done():
                self._finish(self._task.result())  # raises the exec's error, if it failed
                continue
            self._wake = self._loop.create_future()
            await self._wake

    def _finish(self, result: SandboxExecResult) -> None:
        self._finished = True
        if self._error is not None:
            raise self._error
        self.result = result

    def __await__(self) -> Any:
        return self._consume().__await__()

    async def _consume(self) -> SandboxExecResult:
        async with self:
            async for stream, chunk in self:
                if self._on_output is not None:
                    r = self._on_output(stream, chunk)
                    if inspect.isawaitable(r):
                        await r
        assert self.result is not None
        return self.result

    async def wait(self) -> SandboxExecResult:
        """Runs to the end (chunks still go to on_output, if given); the result."""
        return await self._consume()

    # --- leaving early ---------------------------------------------------

    async def aclose(self) -> None:
        """Cancels the command if it still runs (what it started is killed
        before this returns) and releases the pipes."""
        if not self._started or self._finished and not self._readers and not self._writers:
            return
        if self._task is not None and not self._task.done():
            self._task.cancel()  # await_future cancels the sbx future and waits for its end
        if self._py_task is not None and not self._py_task.done():
            self._py_task.cancel()
        for t in (self._task, self._py_task):
            if t is not None:
                try:
                    await t
                except BaseException:  # the cancellation or the exec's own error: it is over
                    pass
        for fd in list(self._readers):
            self._loop.remove_reader(fd)
            os.close(fd)
        self._readers = {}
        self._finished = True
        self._queue.clear()

    async def __aenter__(self) -> ExecStream:
        self._start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # An abandoned stream: the descriptors at least (the task cancels with its loop).
        for fd in list(getattr(self, "_readers", {})):
            try:
                if self._loop is not None and not self._loop.is_closed():
                    self._loop.remove_reader(fd)
                os.close(fd)
            except Exception:
                pass


class SyncExecStream(_StreamBase):
    """The blocking twin of ExecStream (Sandbox.exec_stream): an iterator of
    (stream, chunk), .result after it, wait(), and a context manager that
    cancels the command when left early. Blocks in select() on the two pipes
    and the sbx future's descriptor; no event loop or thread."""

    def __init__(self, sync_sandbox: Any, command: str, **kw: Any) -> None:
        super().__init__(command, **kw)
        self._sync = sync_sandbox
        self._f: c_void_p | None = None
        self._sel: selectors.BaseSelector | None = None

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        command, cwd, env, timeout_s, user = self._args
        asb = self._sync._async_sandbox
        if not _is_c(asb):
            if self._stdin is not None:
                raise TypeError(f"provider {asb._provider.name!r} takes no stdin (a Python provider)")
            result = self._sync.exec(command, cwd=cwd, env=env, timeout_s=timeout_s, user=user)
            self._queue.extend(_whole(result, self._dec))
            self.result = result if self._keep else _strip(result)
            self._finished = True
            return
        if cwd is None:
            cwd = asb._workdir()
        self._f, self._readers, self._writers = _c_start(asb, command, cwd, env, timeout_s, user, self._keep, self._stdin)
        self._sel = selectors.DefaultSelector()
        for fd, stream in self._readers.items():
            self._sel.register(fd, selectors.EVENT_READ, stream)
        self._sel.register(lib.sbx_future_fd(self._f), selectors.EVENT_READ, None)

    def __iter__(self) -> SyncExecStream:
        return self

    def __next__(self) -> Chunk:
        self._start()
        while True:
            if self._queue:
                return self._queue.popleft()
            if self._finished:
                raise StopIteration
            if not self._readers and not self._writers:
                f, self._f = self._f, None
                self._sel.close()
                try:
                    result = _lib.TAKE_EXEC(f)
                finally:
                    lib.sbx_future_free(f)
                self.result = result
                self._finished = True
                continue
            # Short slices so Python runs signal handlers (Ctrl-C) in between.
            for key, _ in self._sel.select(0.25):
                if key.data is None:
                    if lib.sbx_future_done(self._f):
                        self._sel.unregister(key.fd)
                        for fd in self._writers:
                            os.close(fd)
                        self._writers = []
                    continue
                fd, stream = key.fd, key.data
                try:
                    data = os.read(fd, _READ)
                except BlockingIOError:
                    continue
                if data:
                    chunk = self._dec.feed(stream, data)
                    if chunk:
                        self._queue.append((stream, chunk))
                else:
                    self._sel.unregister(fd)
                    del self._readers[fd]
                    os.close(fd)
                    tail = self._dec.feed(stream, b"", True)
                    if tail:
                        self._queue.append((stream, tail))

    def wait(self) -> SandboxExecResult:
        """Runs to the end (chunks go to on_output, if given); the result."""
        with self:
            for stream, chunk in self:
                if self._on_output is not None:
                    self._on_output(stream, chunk)
        assert self.result is not None
        return self.result

    def close(self) -> None:
        """Cancels the command if it still runs (what it started is killed
        before this returns) and releases the pipes."""
        if self._f is not None:
            lib.sbx_future_cancel(self._f)
            _lib.BlockingWait(self._f).wait(None)
            lib.sbx_future_free(self._f)
            self._f = None
        for fd in list(self._readers) + self._writers:
            os.close(fd)
        self._readers, self._writers = {}, []
        if self._sel is not None:
            self._sel.close()
            self._sel = None
        self._finished = True
        self._queue.clear()

    def __enter__(self) -> SyncExecStream:
        self._start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
