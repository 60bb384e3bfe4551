"""The public facades: AsyncSandbox (reference-api.md C-G), its PTY
namespace, and the blocking Sandbox (H).

On a C provider both are thin wrappers over one C `sbx_sandbox`: each method
is the matching libsbx operation (AsyncSandbox awaits its future on the
running loop through the future's descriptor; Sandbox waits for it in the
calling thread), so the lifecycle rules exist once, in src/core/sandbox.c.
Pure-Python providers registered with register_provider() are driven
through the provider protocol with the reference's rules, and their
blocking facade runs a private loop thread, as the reference's does.
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from pathlib import Path
from typing import Any, Sequence, TypeVar

# The value types and protocols are importable from this module too, as from
# the reference's api module (`from nemo_gym.sandbox.api import SandboxSpec`).
from .base import (  # noqa: F401 (re-exports)
    ConnectableProvider,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxProvider,
    SandboxPtyError,
    SandboxPtySession,
    SandboxPtySpec,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPauseResume,
    SupportsSandboxPty,
    SupportsSandboxPtyAttach,
    provider_display_name,
)
from . import _lib, cprovider
from ._lib import lib
from .cprovider import CProvider, CSandbox
from .registry import create_provider, get_provider_class, provider_for_sandbox  # noqa: F401

T = TypeVar("T")

SYNC_OPERATION_TIMEOUT_S = 3600.0
SYNC_LOOP_CLOSE_TIMEOUT_S = 5.0
DEFAULT_EXEC_TIMEOUT_S = 180
# The providers' "no process exit status" sentinel (the reference's name;
# PTY_RUNTIME_RETURN_CODE is sbx's earlier one).
SANDBOX_PTY_RUNTIME_RETURN_CODE = 125
PTY_RUNTIME_RETURN_CODE = SANDBOX_PTY_RUNTIME_RETURN_CODE


def _has_connect(provider: Any) -> bool:
    return hasattr(provider, "serialize_handle") and hasattr(provider, "connect")


def _no_connect(provider: Any) -> RuntimeError:
    """Why `provider` cannot serialize()/connect(), as the reference's
    RuntimeError: a provider without the capability (the reference's text),
    or what is not a provider object at all, said as such. connect() takes
    a provider object only, as the reference's does; a config mapping is
    the commonest mistake (the constructor takes one), so the fix is named."""
    if isinstance(provider, Mapping):
        return RuntimeError(
            "AsyncSandbox.connect() needs a provider object with serialize()/connect(), not a "
            f"config mapping: pass provider=create_provider({dict(provider)!r})"
        )
    if not hasattr(provider, "create"):
        return RuntimeError(
            "AsyncSandbox.connect() needs a provider object with serialize()/connect(); "
            f"got {type(provider).__name__} {provider!r}, which is not a provider"
        )
    return RuntimeError(f"provider {provider_display_name(provider)!r} does not support serialize()/connect()")


# --- PTY --------------------------------------------------------------------


def _pty_timeout(command: str, timeout_s: Any, *, discard: bool) -> SandboxExecResult:
    suffix = "; the command is still running and the session should be discarded" if discard else ""
    return SandboxExecResult(
        stdout=None,
        stderr=f"PTY command timed out after {timeout_s}s: {command!r}{suffix}",
        return_code=SANDBOX_PTY_RUNTIME_RETURN_CODE,
        error_type="timeout",
    )


async def _session_command(session: SandboxPtySession, command: str) -> SandboxExecResult:
    """Runs `command` in a live session and reads up to a one-off marker line.

    The marker is printed from two separate literals, so the terminal's echo
    of the line we write never contains it; the brace group runs the command
    in the session's shell with stdin at EOF (the session's stdin never ends).
    """
    token = "NGPTY" + uuid.uuid4().hex[:12]
    script = f"{{ {command}\n}} </dev/null\nprintf '%s%s:%s\\n' '{token[:5]}' '{token[5:]}' \"$?\"\n"
    await session.write(script.encode())
    needle = (token + ":").encode()
    seen = bytearray()
    while needle not in seen:
        chunk = await session.read()
        if not chunk:
            raise SandboxPtyError("PTY session ended before the command finished")
        seen += chunk
    before, _, after = bytes(seen).partition(needle)
    while b"\n" not in after:  # the status may arrive in a later chunk
        chunk = await session.read()
        if not chunk:
            break
        after += chunk
    status = after.split(b"\n", 1)[0].strip()
    err = bytearray()
    try:
        while True:
            chunk = await session.read_stderr(timeout_s=0.05)
            if not chunk:
                break
            err += chunk
    except (TimeoutError, asyncio.TimeoutError):
        pass
    ok = status.isdigit()
    return SandboxExecResult(
        stdout=before.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace") or None,
        return_code=int(status) if ok else SANDBOX_PTY_RUNTIME_RETURN_CODE,
        error_type=None if ok else "pty",
    )


async def _within(timeout_s: Any, awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, timeout=timeout_s)


def _is_c_session(session: Any) -> bool:
    from .cpty import CPtySession  # noqa: PLC0415

    return isinstance(session, CPtySession)


class SandboxPty:
    """`sandbox.pty`: interactive sessions and one-shot commands in a terminal.
    Async only. On a C provider with PTYs (linux, local) sessions are C
    handles (cpty.py) and exec() is sbx_sandbox_pty_exec; on one without,
    create(), attach() and exec() without a session raise the reference's
    NotImplementedError. exec(cmd, session=s) runs in the session given on
    any provider, as in the reference (here, for a session C does not know)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox
        self._default: SandboxPtySession | None = None  # oldest live command-less session
        self._lock = asyncio.Lock()  # one command at a time per sandbox's sessions

    def _provider(self) -> Any:
        return self._sandbox._provider

    async def create(
        self,
        command: str | None = None,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        rows: int = 24,
        cols: int = 80,
        user: str | int | None = None,
        pty: bool = True,
    ) -> SandboxPtySession:
        provider = self._provider()
        if not hasattr(provider, "create_pty"):
            raise NotImplementedError(
                f"Sandbox provider {provider_display_name(provider)!r} does not support PTY sessions; "
                "use exec() instead"
            )
        sb = self._sandbox
        handle = sb._require_handle()
        spec = SandboxPtySpec(
            command=command,
            cwd=cwd if cwd is not None else sb._workdir(),
            env=env,
            rows=rows,
            cols=cols,
            user=user,
            pty=pty,
        )
        session = await provider.create_pty(handle, spec)
        if command is None and (self._default is None or self._default.closed):
            self._default = session
        return session

    async def attach(self, session_id: str, *, takeover: bool = True, since: int | None = None) -> SandboxPtySession:
        provider = self._provider()
        if not hasattr(provider, "attach_pty"):
            raise NotImplementedError(
                f"Sandbox provider {provider_display_name(provider)!r} does not support re-attaching PTY sessions"
            )
        return await provider.attach_pty(self._sandbox._require_handle(), session_id, takeover=takeover, since=since)

    async def exec(
        self,
        command: str,
        *,
        session: SandboxPtySession | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = DEFAULT_EXEC_TIMEOUT_S,
        user: str | int | None = None,
        rows: int = 24,
        cols: int = 80,
        pty: bool = True,
    ) -> SandboxExecResult:
        # On a C sandbox the rules run in C (sbx_sandbox_pty_exec), for the
        # C sessions it knows; a session object from elsewhere runs here.
        if self._sandbox._csb is not None and (session is None or _is_c_session(session)):
            return await self._c_exec(command, session, cwd, env, timeout_s, user, rows, cols, pty)
        # No capability check here: a session passed in (from wherever it
        # came) runs without create_pty, as in the reference; opening a
        # session (the one-shot path) goes through create(), which checks.
        implicit = False
        plain = cwd is None and env is None and user is None and pty and (rows, cols) == (24, 80)
        if session is None and plain:
            if self._default is not None and self._default.closed:
                self._default = None
            session = self._default
            implicit = session is not None
        if session is not None:
            if cwd is not None or env is not None or user is not None:
                raise ValueError(
                    "cwd/env/user apply only when pty.exec opens its own session; "
                    "for an existing session they are fixed at pty.create() time"
                )
            return await self._in_session(session, command, timeout_s, implicit)
        return await self._one_shot(command, cwd, env, timeout_s, user, rows, cols, pty)

    async def _c_exec(
        self,
        command: str,
        session: Any,
        cwd: Any,
        env: Any,
        timeout_s: Any,
        user: Any,
        rows: int,
        cols: int,
        pty: bool,
    ) -> SandboxExecResult:
        from .cpty import pty_exec  # noqa: PLC0415 (loaded with the first session)

        if session is None:
            # No default can exist without PTYs: this is create()'s check, in create()'s order.
            if not hasattr(self._provider(), "create_pty"):
                raise NotImplementedError(
                    f"Sandbox provider {provider_display_name(self._provider())!r} does not support PTY "
                    "sessions; use exec() instead"
                )
            self._sandbox._require_handle()
        res = await asyncio.to_thread(
            pty_exec, self._sandbox._csb.ptr, command, session, cwd, env, timeout_s, user, rows, cols, pty
        )
        if res.error_type == "timeout" and res.stdout is None and res.stderr is not None:
            # C prints the timeout from a double; the reference prints the
            # value it was given (2 and 2.0 differ): the same text, Python's way.
            return _pty_timeout(command, timeout_s, discard=res.stderr.endswith("should be discarded"))
        return res

    async def _in_session(
        self, session: SandboxPtySession, command: str, timeout_s: Any, implicit: bool
    ) -> SandboxExecResult:
        async def locked() -> SandboxExecResult:
            async with self._lock:
                return await _session_command(session, command)

        try:
            # The timeout covers the wait for the lock as well as the command.
            return await _within(timeout_s, locked())
        except (TimeoutError, asyncio.TimeoutError):
            if implicit:
                # The session's stream now carries the stray command's output:
                # retire it so no later implicit exec inherits it.
                try:
                    await session.close()
                except Exception:
                    pass
                if self._default is session:
                    self._default = None
            return _pty_timeout(command, timeout_s, discard=True)

    async def _one_shot(
        self, command: str, cwd: Any, env: Any, timeout_s: Any, user: Any, rows: int, cols: int, pty: bool
    ) -> SandboxExecResult:
        session = await self.create(command, cwd=cwd, env=env, rows=rows, cols=cols, user=user, pty=pty)

        async def drain(read: Callable[[], Awaitable[bytes]]) -> bytes:
            out = bytearray()
            while True:
                chunk = await read()
                if not chunk:
                    return bytes(out)
                out += chunk

        try:
            out, err, rc = await _within(
                timeout_s, asyncio.gather(drain(session.read), drain(session.read_stderr), session.wait_exit())
            )
        except (TimeoutError, asyncio.TimeoutError):
            return _pty_timeout(command, timeout_s, discard=False)
        finally:
            await session.close()
        return SandboxExecResult(
            stdout=out.decode("utf-8", "replace"),
            stderr=None if pty else err.decode("utf-8", "replace"),
            return_code=rc,
        )


# --- AsyncSandbox -----------------------------------------------------------


def _c_provider(provider: Mapping[str, Any] | Any) -> Any:
    """The provider object an AsyncSandbox runs on. A config mapping naming a
    C provider gives the process's shared provider for that config; other
    mappings are built as create_provider() builds them."""
    return provider_for_sandbox(provider) if isinstance(provider, Mapping) else provider


class AsyncSandbox:
    """One sandbox on a provider. Constructing it creates nothing; start() does.

    On a C provider (CProvider: built in, registered in C, or a C plugin) it
    is a thin wrapper over one C `sbx_sandbox` held in `self._csb` (a
    cprovider.CSandbox; `self._csb.ptr` is the `sbx_sandbox *`): every method
    is the matching `sbx_sandbox_*_async` call awaited on the running loop,
    and the lifecycle rules are src/core/sandbox.c's alone. On a Python
    provider (register_provider) `self._csb` is None and the methods apply
    the reference's rules to the provider object below.
    """

    def __init__(
        self, provider: Mapping[str, Any] | Any, spec: SandboxSpec | None = None, owns_provider: bool = True
    ) -> None:
        self._provider = _c_provider(provider)
        # The newer reference's owns_provider: False, stop() leaves the
        # provider open for its other sandboxes (the caller closes it). A C
        # provider is shared by reference count and never closed by stop().
        self._owns_provider = bool(owns_provider)
        self._spec = spec  # C: the spec given last (informational; C keeps its own copy)
        # The C sandbox (C providers only): the one object C operations take.
        self._csb: CSandbox | None = None
        if isinstance(self._provider, CProvider):
            self._csb = CSandbox.new(self._provider, spec)
        self._handle_: SandboxHandle | None = None
        self._stopped = True
        self._closed = False
        self._stop_calls = 0  # Python path: stop() calls so far (start() notices one meanwhile)
        self.pty = SandboxPty(self)

    # The Python-provider path keeps its handle in _handle_; for a C sandbox
    # the handle is a view of the C object (raw = the CSandbox).
    @property
    def _handle(self) -> SandboxHandle | None:
        if self._csb is None:
            return self._handle_
        sid = self._csb.id
        if sid is None:
            return None
        return SandboxHandle(sandbox_id=sid, provider_name=self._provider.name, raw=self._csb)

    @_handle.setter
    def _handle(self, value: SandboxHandle | None) -> None:
        self._handle_ = value

    @property
    def sandbox_id(self) -> str | None:
        """The provider's id for the box, or None before start."""
        if self._csb is not None:
            return self._csb.id
        return self._handle_.sandbox_id if self._handle_ is not None else None

    @property
    def handle(self) -> SandboxHandle | None:
        return self._handle

    def _workdir(self) -> str | None:
        return self._spec.workdir if self._spec is not None else None

    def _require_handle(self) -> SandboxHandle:
        if self._csb is not None:
            # A view for code that hands the handle to the provider object
            # (cprovider._box(handle) is the sbx_sandbox *); C re-checks the
            # state on every operation.
            handle = self._handle
            if handle is None:
                raise RuntimeError("Sandbox has not been started")
            return handle
        if self._handle_ is None or self._stopped:
            raise RuntimeError("Sandbox has not been started")
        return self._handle_

    async def start(self, spec: SandboxSpec | None = None) -> AsyncSandbox:
        if self._csb is not None:
            await _lib.await_future(*self._csb.start(spec))
            if spec is not None:
                self._spec = spec
            return self
        if self._closed:
            raise RuntimeError("Sandbox has been stopped")
        if self._handle_ is not None and not self._stopped:
            raise RuntimeError("Sandbox is already started")
        wanted = spec if spec is not None else self._spec
        if wanted is None:
            raise ValueError("Sandbox.start() requires a SandboxSpec")
        stops = self._stop_calls
        handle = await self._provider.create(wanted)
        try:
            if self._closed or self._stop_calls != stops:
                # stop() ran while create was in flight: the reference leaks
                # this box; sbx ends it.
                raise RuntimeError("Sandbox has been stopped")
            if wanted.files:
                await self._upload_startup_files(handle, wanted.files)
        except BaseException:
            # Also on cancellation, so a cancelled start leaves no box behind.
            try:
                await self._provider.close(handle)
            finally:
                self._closed = True
                if self._owns_provider:
                    await self._provider.aclose()
            raise
        self._spec = wanted
        self._handle_ = handle
        self._stopped = False
        return self

    async def _upload_startup_files(self, handle: SandboxHandle, files: Mapping[str, str]) -> None:
        with tempfile.TemporaryDirectory(prefix="nemo-gym-sandbox-upload-") as tmp:
            for index, (target, contents) in enumerate(files.items()):
                source = Path(tmp) / f"file-{index}"
                if isinstance(contents, str):
                    source.write_text(contents, encoding="utf-8")
                else:  # [svc-logs] bytes or SandboxFile: the staged file's bytes and mode
                    from .files import stage_file  # noqa: PLC0415

                    stage_file(source, contents)
                await self._provider.upload_file(handle, source, target)

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = DEFAULT_EXEC_TIMEOUT_S,
        user: str | int | None = None,
    ) -> SandboxExecResult:
        if self._csb is not None:
            return await _lib.await_future(*self._csb.exec(command, cwd, env, timeout_s, user))
        if not isinstance(command, str):
            # A Python provider takes a string: the argv joined as the shell would read it back.
            command = shlex.join(cprovider.exec_argv(command))
        handle = self._require_handle()
        return await self._provider.exec(
            handle,
            command,
            cwd=cwd if cwd is not None else self._workdir(),
            env=env,
            timeout_s=timeout_s,
            user=user,
        )

    def exec_stream(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = DEFAULT_EXEC_TIMEOUT_S,
        user: str | int | None = None,
        text: bool = False,
        keep_output: bool = True,
        on_output: Callable[[str, Any], Any] | None = None,
        stdin: Any = None,
    ) -> Any:
        """exec() with the output as it arrives: `async for stream, chunk in
        sandbox.exec_stream(cmd)`, then `.result`; or `await
        sandbox.exec_stream(cmd, on_output=cb)` for the result. See sbx.stream."""
        from .stream import ExecStream

        self._require_handle()
        return ExecStream(
            self, command, cwd=cwd if cwd is not None else self._workdir(), env=env, timeout_s=timeout_s,
            user=user, text=text, keep_output=keep_output, on_output=on_output, stdin=stdin,
        )

    async def upload(self, local_path: Path | str, remote_path: str) -> None:
        if self._csb is not None:
            return await _lib.await_future(*self._csb.upload(local_path, remote_path))
        await self._provider.upload_file(self._require_handle(), Path(local_path), remote_path)

    async def download(self, remote_path: str, local_path: Path | str) -> None:
        if self._csb is not None:
            return await _lib.await_future(*self._csb.download(remote_path, local_path))
        await self._provider.download_file(self._require_handle(), remote_path, Path(local_path))

    # --- background processes (C providers with PTYs; sbx.cproc) -------------
    def _csb_ptr(self, what: str) -> Any:
        if self._csb is None:
            raise NotImplementedError(f"{what} needs a C provider with PTY sessions (linux)")
        return self._csb._live_ptr()

    async def spawn(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | int | None = None,
    ) -> Any:
        """Starts `command` in the background (pipes: stdout and stderr
        apart) and returns an sbx.cproc.AsyncProcess: write/close_stdin,
        read/stdout/stderr, wait/poll/returncode, signal/kill, detach. The
        process outlives the handle: attach_process(id) comes back to it."""
        from . import cproc

        sb = self._csb_ptr("spawn")
        return cproc.AsyncProcess(await asyncio.to_thread(cproc.start, sb, command, cwd, env, user))

    exec_background = spawn

    async def attach_process(
        self, process_id: int | str, *, takeover: bool = False, keep: bool = False, since: int = 0
    ) -> Any:
        """A new handle on background process `process_id` (from spawn, `sbx
        exec -d`, any process): output replays from byte offset `since`.
        keep: reading its end does not make the box forget it."""
        from . import cproc

        sb = self._csb_ptr("attach_process")
        return cproc.AsyncProcess(await asyncio.to_thread(cproc.attach, sb, process_id, takeover, keep, since))

    async def processes(self) -> list[dict[str, Any]]:
        """The box's sessions and background processes (sbx_proc_list)."""
        from . import cproc

        return await asyncio.to_thread(cproc.list_processes, self._csb_ptr("processes"))

    async def top(self) -> dict[str, Any]:
        """The box's processes, as its /proc shows them (sbx_sandbox_top)."""
        from . import cproc

        return await asyncio.to_thread(cproc.top, self._csb_ptr("top"))

    async def stats(self) -> dict[str, Any]:
        """What the box uses now (sbx_sandbox_stats)."""
        from . import cproc

        return await asyncio.to_thread(cproc.stats, self._csb_ptr("stats"))

    async def pause(self) -> None:
        """Pauses the box keeping its state (docs/pause.md): exec and transfers
        fail at once until resume(). The provider must support it (linux, docker)."""
        if self._csb is not None:
            await _lib.await_future(*self._csb.pause())
            return
        if not isinstance(self._provider, SupportsSandboxPauseResume):
            raise NotImplementedError(
                f"Sandbox provider {provider_display_name(self._provider)!r} does not support pausing sandboxes")
        await self._provider.pause(self._require_handle())

    async def resume(self) -> None:
        """Continues a paused box."""
        if self._csb is not None:
            await _lib.await_future(*self._csb.resume())
            return
        if not isinstance(self._provider, SupportsSandboxPauseResume):
            raise NotImplementedError(
                f"Sandbox provider {provider_display_name(self._provider)!r} does not support pausing sandboxes")
        await self._provider.resume(self._require_handle())

    async def status(self) -> SandboxStatus:
        if self._csb is not None:
            return await _lib.await_future(*self._csb.status())
        if self._handle_ is None:
            return SandboxStatus.UNKNOWN
        if self._stopped:
            return SandboxStatus.STOPPED
        return await self._provider.status(self._handle_)

    async def logs(
        self,
        *,
        since: Any = None,
        tail: int | None = None,
        follow: bool = False,
        on_entry: Callable[[Any], Any] | None = None,
    ) -> Any:
        """[svc-logs] The service's output (sbx.logs.LogEntry: time, stream,
        data), oldest first: a list, or None with `on_entry` (called per
        entry on a worker thread; a true return stops). `since`: unix seconds
        or a datetime; `tail`: the last N lines (a line read in pieces counts once); `follow`: until the
        service ends or the box is stopped. C providers that keep logs only."""
        from . import logs as _logs

        ptr = self._c_ptr("logs")
        return await asyncio.to_thread(_logs.read, ptr, since=since, tail=tail, follow=follow, on_entry=on_entry)

    def _c_ptr(self, what: str) -> Any:
        if self._csb is not None:
            return self._csb._live_ptr()
        raise NotImplementedError(f"{what}() needs a C provider (such as linux)")

    async def endpoint(self, port: int) -> SandboxEndpoint:
        if self._csb is not None:
            return await _lib.await_future(*self._csb.endpoint(port))
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"Sandbox endpoint port must be an integer between 1 and 65535, got {port!r}")
        declared = list(self._spec.ports) if self._spec is not None else []
        if port not in declared:
            raise ValueError(
                f"Sandbox port {port} was not declared in SandboxSpec.ports; declared ports: {declared!r}"
            )
        if not hasattr(self._provider, "endpoint"):
            raise NotImplementedError(
                f"Sandbox provider {provider_display_name(self._provider)!r} does not support service endpoints"
            )
        result = await self._provider.endpoint(self._require_handle(), port)
        if not isinstance(result, SandboxEndpoint):
            raise TypeError(f"Sandbox provider endpoint() must return SandboxEndpoint, got {type(result).__name__}")
        return result

    async def stop(self) -> None:
        if self._csb is not None:
            # The C sandbox object stays (status() answers STOPPED); it and
            # its provider reference go with this object.
            return await _lib.await_future(*self._csb.stop())
        if self._closed:
            return
        self._stop_calls += 1
        try:
            if self._handle_ is not None and not self._stopped:
                self._stopped = True
                await self._provider.close(self._handle_)
        finally:
            # Closed only once aclose() succeeded: when it raises, a second
            # stop() retries it (the box itself is not closed twice).
            if self._owns_provider:
                await self._provider.aclose()
            self._closed = True

    async def serialize(self, *, scope: str | None = None) -> dict[str, Any]:
        """A descriptor another process passes to AsyncSandbox.connect()."""
        if self._csb is not None:
            return await _lib.await_future(*self._csb.serialize(scope))
        if not _has_connect(self._provider):
            raise _no_connect(self._provider)
        descriptor = await self._provider.serialize_handle(self._require_handle(), scope=scope)
        if isinstance(descriptor, dict) and descriptor.get("workdir") is None and self._spec is not None:
            descriptor = {**descriptor, "workdir": self._spec.workdir}
        return descriptor

    @classmethod
    async def connect(cls, descriptor: Mapping[str, Any] | Any, *, provider: Any) -> AsyncSandbox:
        """A started sandbox for the box `descriptor` names; stop() ends it."""
        if not isinstance(provider, CProvider) and not _has_connect(provider):
            raise _no_connect(provider)
        if not isinstance(descriptor, Mapping) and hasattr(descriptor, "to_dict"):
            descriptor = descriptor.to_dict()
        if isinstance(provider, CProvider):
            csb = await _lib.await_future(*cprovider.connect(provider, descriptor))
            return cls._from_csb(provider, csb, None)
        handle = await provider.connect(descriptor)
        workdir = descriptor.get("workdir") if isinstance(descriptor, Mapping) else None
        sandbox = cls(provider, SandboxSpec(workdir=workdir))
        sandbox._handle_ = handle
        sandbox._stopped = False
        return sandbox

    @classmethod
    def _from_csb(cls, provider: CProvider, csb: CSandbox, spec: SandboxSpec | None) -> AsyncSandbox:
        """An AsyncSandbox over a C sandbox already started (connect, a warm
        pool's claim); `spec` None: one with the C sandbox's workdir."""
        sandbox = cls.__new__(cls)
        sandbox._provider = provider
        sandbox._owns_provider = True
        if spec is None:
            wd = lib.sbx_sandbox_workdir(csb.ptr)
            spec = SandboxSpec(workdir=wd.decode() if wd is not None else None)
        sandbox._spec = spec
        sandbox._csb = csb
        sandbox._handle_ = None
        sandbox._stopped = True
        sandbox._closed = False
        sandbox._stop_calls = 0
        sandbox.pty = SandboxPty(sandbox)
        return sandbox

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.stop()

    def __repr__(self) -> str:
        if self._csb is not None:
            return f"<AsyncSandbox {provider_display_name(self._provider)!r} {self.sandbox_id}>"
        state = "closed" if self._closed else "started" if not self._stopped else "new"
        return f"<AsyncSandbox {provider_display_name(self._provider)!r} {self.sandbox_id} {state}>"


# --- the blocking facade ----------------------------------------------------


class _AsyncLoopRunner:
    """A private event loop on a daemon thread that runs sandbox coroutines
    for blocking callers."""

    def __init__(
        self,
        *,
        wait_timeout_s: float = SYNC_OPERATION_TIMEOUT_S,
        close_timeout_s: float = SYNC_LOOP_CLOSE_TIMEOUT_S,
    ) -> None:
        self._wait_timeout_s = wait_timeout_s
        self._close_timeout_s = close_timeout_s
        self._loop = asyncio.new_event_loop()
        self._closed = False
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="nemo-gym-sandbox-sync-loop", daemon=True)
        self._thread.start()
        ready.wait()

    def _ensure_can_block(self, operation: str) -> None:
        if self._closed or self._loop.is_closed():
            raise RuntimeError("Sandbox sync loop is closed")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(f"Sandbox.{operation}() is blocking; use AsyncSandbox in async code instead.")

    def _wait(self, operation: str, future: Future[T]) -> T:
        try:
            return future.result(timeout=self._wait_timeout_s)
        except FutureTimeoutError as exc:
            future.cancel()
            raise TimeoutError(
                f"Sandbox.{operation}() timed out waiting for the sync loop after {self._wait_timeout_s:g}s"
            ) from exc

    def call(self, operation: str, func: Callable[[], T]) -> T:
        """Runs a plain function on the loop thread (it keeps running on timeout)."""
        self._ensure_can_block(operation)
        future: Future[T] = Future()

        def invoke() -> None:
            try:
                value = func()
            except BaseException as exc:
                if not future.cancelled():
                    future.set_exception(exc)
            else:
                if not future.cancelled():
                    future.set_result(value)

        self._loop.call_soon_threadsafe(invoke)
        return self._wait(operation, future)

    def run(self, operation: str, factory: Callable[[], Awaitable[T]]) -> T:
        """Runs a coroutine on the loop; a timeout really cancels it."""
        self._ensure_can_block(operation)
        return self._wait(operation, asyncio.run_coroutine_threadsafe(factory(), self._loop))

    async def _drain_and_stop(self) -> None:
        try:
            me = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks(self._loop) if t is not me]
            if pending:
                await asyncio.wait(pending, timeout=self._close_timeout_s)
        finally:
            self._loop.stop()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loop.is_closed():
            return
        # Operations cancelled by a wait timeout may still be ending (a C
        # operation is awaited until what it started is gone): let them
        # finish, within the close timeout, before the loop stops.
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._drain_and_stop()))
        self._thread.join(timeout=self._close_timeout_s)
        if self._thread.is_alive():
            return  # still busy: leave the loop to the daemon thread
        self._loop.close()


class _CallingThread:
    """The loop runner's contract (same checks, timeouts and messages) for a
    sandbox on a C provider, without a loop or a thread of its own: each call
    submits the C operation and blocks on its future in the calling thread
    (sbx_future_wait with the GIL released, as the C blocking API does), so
    many threads may use one Sandbox at once and their operations run in
    parallel in libsbx. A wait past wait_timeout_s, or Ctrl-C, cancels the
    operation and returns once what it started is gone."""

    def __init__(
        self,
        *,
        wait_timeout_s: float = SYNC_OPERATION_TIMEOUT_S,
        close_timeout_s: float = SYNC_LOOP_CLOSE_TIMEOUT_S,
    ) -> None:
        self._wait_timeout_s = wait_timeout_s
        self._close_timeout_s = close_timeout_s
        self._closed = False

    def _ensure_can_block(self, operation: str) -> None:
        if self._closed:
            raise RuntimeError("Sandbox sync loop is closed")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(f"Sandbox.{operation}() is blocking; use AsyncSandbox in async code instead.")

    def call(self, operation: str, func: Callable[[], T]) -> T:
        self._ensure_can_block(operation)
        return func()

    def wait(self, operation: str, submit: Callable[[], tuple[Any, Callable[[Any], T]]]) -> T:
        """Submits one C operation (`submit` returns its (future, take)) and waits for it."""
        self._ensure_can_block(operation)
        future, take = submit()
        return _lib.wait_future(
            future,
            take,
            timeout_s=self._wait_timeout_s,
            on_timeout=lambda: TimeoutError(
                f"Sandbox.{operation}() timed out waiting for the sync loop after {self._wait_timeout_s:g}s"
            ),
        )

    def run(self, operation: str, factory: Callable[[], Awaitable[T]]) -> T:
        """Runs an AsyncSandbox coroutine, for a method that is more than one
        C operation (none of the above is), on a short-lived asyncio loop in
        the calling thread; a wait timeout cancels it (its cleanup runs)."""
        self._ensure_can_block(operation)

        async def bounded() -> T:
            try:
                return await asyncio.wait_for(factory(), timeout=self._wait_timeout_s)
            except (TimeoutError, asyncio.TimeoutError) as exc:
                raise TimeoutError(
                    f"Sandbox.{operation}() timed out waiting for the sync loop after {self._wait_timeout_s:g}s"
                ) from exc

        return asyncio.run(bounded())

    def close(self) -> None:
        self._closed = True


def _runs_on_c(provider: Any) -> bool:
    """Whether `provider` (an object or a config mapping) is a C provider."""
    if isinstance(provider, CProvider):
        return True
    if not isinstance(provider, Mapping) or len(provider) != 1:
        return False
    name = next(iter(provider))
    if not isinstance(name, str) or not name:
        return False
    try:
        cls = get_provider_class(name)
    except Exception:  # AsyncSandbox raises it again, from the reference's place
        return False
    return isinstance(cls, type) and issubclass(cls, CProvider)


class Sandbox:
    """The blocking facade over AsyncSandbox, for code without an event loop.
    pty, serialize and connect are async only, as in the reference.

    Python providers run on a private event loop thread, as in the reference
    (_AsyncLoopRunner). On a C provider there is no loop of ours: each call
    is the C operation on `self._async_sandbox._csb`, waited for in the
    calling thread (_CallingThread)."""

    def __init__(
        self, provider: Mapping[str, Any] | Any, spec: SandboxSpec | None = None, owns_provider: bool = True
    ) -> None:
        self._runner: _AsyncLoopRunner | _CallingThread = (
            _CallingThread() if _runs_on_c(provider) else _AsyncLoopRunner()
        )
        try:
            # Providers may bind loop-scoped resources: build them on the loop.
            self._async_sandbox = self._runner.call(
                "__init__", lambda: AsyncSandbox(provider, spec, owns_provider=owns_provider)
            )
        except BaseException:
            self._runner.close()
            raise
        self._closed = False

    @classmethod
    def _from_async(cls, asb: AsyncSandbox) -> Sandbox:
        """The blocking facade over an AsyncSandbox on a C provider (a warm pool's claim)."""
        sandbox = cls.__new__(cls)
        sandbox._runner = _CallingThread()
        sandbox._async_sandbox = asb
        sandbox._closed = False
        return sandbox

    @property
    def sandbox_id(self) -> str | None:
        return self._async_sandbox.sandbox_id

    def _c(self) -> CSandbox | None:
        return self._async_sandbox._csb if isinstance(self._runner, _CallingThread) else None

    def start(self, spec: SandboxSpec | None = None) -> Sandbox:
        c = self._c()
        if c is not None:
            self._runner.wait("start", lambda: c.start(spec))
            if spec is not None:
                self._async_sandbox._spec = spec
        else:
            self._runner.run("start", lambda: self._async_sandbox.start(spec))
        return self

    def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = DEFAULT_EXEC_TIMEOUT_S,
        user: str | int | None = None,
    ) -> SandboxExecResult:
        c = self._c()
        if c is not None:
            return self._runner.wait("exec", lambda: c.exec(command, cwd, env, timeout_s, user))
        return self._runner.run(
            "exec", lambda: self._async_sandbox.exec(command, cwd=cwd, env=env, timeout_s=timeout_s, user=user)
        )

    def exec_stream(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = DEFAULT_EXEC_TIMEOUT_S,
        user: str | int | None = None,
        text: bool = False,
        keep_output: bool = True,
        on_output: Callable[[str, Any], Any] | None = None,
        stdin: Any = None,
    ) -> Any:
        """The blocking exec_stream: `for stream, chunk in sandbox.exec_stream(cmd)`,
        then `.result`; or `.wait()` (calling on_output per chunk). See sbx.stream."""
        from .stream import SyncExecStream

        self._async_sandbox._require_handle()
        return SyncExecStream(
            self, command, cwd=cwd, env=env, timeout_s=timeout_s, user=user, text=text,
            keep_output=keep_output, on_output=on_output, stdin=stdin,
        )

    def upload(self, local_path: Path | str, remote_path: str) -> None:
        c = self._c()
        if c is not None:
            return self._runner.wait("upload", lambda: c.upload(local_path, remote_path))
        self._runner.run("upload", lambda: self._async_sandbox.upload(local_path, remote_path))

    def download(self, remote_path: str, local_path: Path | str) -> None:
        c = self._c()
        if c is not None:
            return self._runner.wait("download", lambda: c.download(remote_path, local_path))
        self._runner.run("download", lambda: self._async_sandbox.download(remote_path, local_path))

    # --- background processes (C providers with PTYs; sbx.cproc) -------------
    def _csb_ptr(self, what: str) -> Any:
        c = self._c()
        if c is None:
            raise NotImplementedError(f"{what} needs a C provider with PTY sessions (linux)")
        return c._live_ptr()

    def spawn(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | int | None = None,
    ) -> Any:
        """Starts `command` in the background; an sbx.cproc.Process (see AsyncSandbox.spawn)."""
        from . import cproc

        return cproc.Process(cproc.start(self._csb_ptr("spawn"), command, cwd, env, user))

    exec_background = spawn

    def attach_process(
        self, process_id: int | str, *, takeover: bool = False, keep: bool = False, since: int = 0
    ) -> Any:
        from . import cproc

        return cproc.Process(cproc.attach(self._csb_ptr("attach_process"), process_id, takeover, keep, since))

    def processes(self) -> list[dict[str, Any]]:
        from . import cproc

        return cproc.list_processes(self._csb_ptr("processes"))

    def top(self) -> dict[str, Any]:
        from . import cproc

        return cproc.top(self._csb_ptr("top"))

    def stats(self) -> dict[str, Any]:
        from . import cproc

        return cproc.stats(self._csb_ptr("stats"))

    def pause(self) -> None:
        """Pauses the box keeping its state; resume() continues it."""
        c = self._c()
        if c is not None:
            self._runner.wait("pause", c.pause)
        else:
            self._runner.run("pause", self._async_sandbox.pause)

    def resume(self) -> None:
        c = self._c()
        if c is not None:
            self._runner.wait("resume", c.resume)
        else:
            self._runner.run("resume", self._async_sandbox.resume)

    def status(self) -> SandboxStatus:
        if self._closed:
            return SandboxStatus.STOPPED
        c = self._c()
        if c is not None:
            return self._runner.wait("status", c.status)
        return self._runner.run("status", self._async_sandbox.status)

    def logs(
        self,
        *,
        since: Any = None,
        tail: int | None = None,
        follow: bool = False,
        on_entry: Callable[[Any], Any] | None = None,
    ) -> Any:
        """[svc-logs] The blocking AsyncSandbox.logs(), in the calling thread."""
        from . import logs as _logs

        ptr = self._async_sandbox._c_ptr("logs")
        return _logs.read(ptr, since=since, tail=tail, follow=follow, on_entry=on_entry)

    def endpoint(self, port: int) -> SandboxEndpoint:
        c = self._c()
        if c is not None:
            return self._runner.wait("endpoint", lambda: c.endpoint(port))
        return self._runner.run("endpoint", lambda: self._async_sandbox.endpoint(port))

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        c = self._c()
        try:
            if c is not None:
                self._runner.wait("stop", c.stop)
            else:
                self._runner.run("stop", self._async_sandbox.stop)
        finally:
            self._runner.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        try:
            self.stop()
        except Exception:
            pass
