"""C providers (built into libsbx, registered in C, or loaded as plugins)
behind the Python provider protocol: create/exec/upload_file/download_file/
status/close/aclose, plus endpoint and serialize_handle/connect when the C
provider has them. AsyncSandbox drives these exactly as it drives a pure
Python provider; every call is one sbx `_async` operation whose future is
awaited on the running asyncio loop.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import json
import shlex
import os
import threading
import weakref
from collections.abc import Mapping
from ctypes import byref, c_void_p
from pathlib import Path
from typing import Any

from . import _lib
from ._lib import lib
from .base import SandboxEndpoint, SandboxExecResult, SandboxHandle, SandboxSpec, SandboxStatus

# Every C sandbox object still alive, so interpreter exit stops their boxes.
_live: weakref.WeakSet[CSandbox] = weakref.WeakSet()
_live_lock = threading.Lock()


class CSandbox:
    """Owns one C `sbx_sandbox *` (`ptr`). The lifecycle rules (states,
    defaults, startup files, stop during start, idempotent stop) are
    src/core/sandbox.c's: each method below only converts arguments, submits
    the matching `sbx_sandbox_*_async` call and returns `(future, take)`,
    where `take(future)` turns the completed future into the Python value.
    AsyncSandbox awaits the pair on its event loop (_lib.await_future); the
    blocking Sandbox waits on it in the calling thread (_lib.wait_future).

    Freeing it stops a box it started and did not stop (the C library's
    no-leak rule); a connected one is only released."""

    __slots__ = ("ptr", "provider", "__weakref__")

    def __init__(self, ptr: c_void_p, provider: CProvider | None = None) -> None:
        self.ptr = ptr
        self.provider = provider  # keeps the Python object (and its name) alive with the box
        with _live_lock:
            _live.add(self)

    @classmethod
    def new(cls, provider: CProvider, spec: SandboxSpec | None) -> CSandbox:
        """sbx_sandbox_new(): a sandbox object on `provider`; nothing is created yet."""
        cspec = spec_to_c(spec) if spec is not None else c_void_p()
        sb = c_void_p()
        try:
            _lib.call(lib.sbx_sandbox_new, provider._ptr, cspec, byref(sb))
        finally:
            lib.sbx_spec_free(cspec)
        return cls(sb, provider)

    @property
    def id(self) -> str | None:
        sid = lib.sbx_sandbox_id(self.ptr) if self.ptr else None
        return sid.decode() if sid else None

    def _live_ptr(self) -> c_void_p:
        if not self.ptr:
            raise RuntimeError("Sandbox has not been started")
        return self.ptr

    # --- one C operation each: (future, take) ---------------------------------

    def start(self, spec: SandboxSpec | None) -> tuple[c_void_p, Any]:
        # Startup files travel in the spec: sbx_sandbox_start uploads them.
        cspec = spec_to_c(spec) if spec is not None else c_void_p()
        try:
            f = _lib.submit(lib.sbx_sandbox_start_async, self._live_ptr(), cspec)
        finally:
            lib.sbx_spec_free(cspec)
        return f, _lib.TAKE_NONE

    def exec(self, command: Any, cwd: Any, env: Any, timeout_s: Any, user: Any) -> tuple[c_void_p, Any]:
        opts = exec_opts(cwd, env, timeout_s, user)
        try:
            if not isinstance(command, str):
                # An argv (a list or tuple of str): run without a shell (sbx_exec_opts_set_argv);
                # the string is its description, and what a provider without argv runs.
                argv = exec_argv(command)
                words = (ctypes.c_char_p * (len(argv) + 1))(*[_lib.cstr(a, "an argv word") for a in argv], None)
                _lib.check(lib.sbx_exec_opts_set_argv(opts, words), c_void_p())
                command = shlex.join(argv)
            f = _lib.submit(lib.sbx_sandbox_exec_async, self._live_ptr(), _lib.cstr(command, "the command"), opts)
        finally:
            lib.sbx_exec_opts_free(opts)
        return f, _lib.TAKE_EXEC

    def upload(self, local_path: Path | str, remote_path: str) -> tuple[c_void_p, Any]:
        f = _lib.submit(
            lib.sbx_sandbox_upload_async,
            self._live_ptr(),
            _lib.cpath(local_path),
            _lib.cstr(remote_path, "the target path"),
        )
        return f, _lib.TAKE_NONE

    def download(self, remote_path: str, local_path: Path | str) -> tuple[c_void_p, Any]:
        f = _lib.submit(
            lib.sbx_sandbox_download_async,
            self._live_ptr(),
            _lib.cstr(remote_path, "the source path"),
            _lib.cpath(local_path),
        )
        return f, _lib.TAKE_NONE

    def status(self) -> tuple[c_void_p, Any]:
        return _lib.submit(lib.sbx_sandbox_status_async, self._live_ptr()), _lib.TAKE_STATUS

    def endpoint(self, port: Any) -> tuple[c_void_p, Any]:
        # Only what C cannot be handed is checked here (a non-int, or one past
        # a C int); the range and the declared-ports rule are C's.
        if isinstance(port, bool) or not isinstance(port, int) or not -(2**31) <= port < 2**31:
            raise ValueError(f"Sandbox endpoint port must be an integer between 1 and 65535, got {port!r}")
        return _lib.submit(lib.sbx_sandbox_endpoint_async, self._live_ptr(), port), _lib.TAKE_ENDPOINT

    def serialize(self, scope: str | None) -> tuple[c_void_p, Any]:
        f = _lib.submit(lib.sbx_sandbox_serialize_async, self._live_ptr(), _lib.cstr(scope))
        return f, _take_json

    def stop(self) -> tuple[c_void_p, Any]:
        return _lib.submit(lib.sbx_sandbox_stop_async, self._live_ptr()), _lib.TAKE_NONE

    def pause(self) -> tuple[c_void_p, Any]:
        return _lib.submit(lib.sbx_sandbox_pause_async, self._live_ptr()), _lib.TAKE_NONE

    def resume(self) -> tuple[c_void_p, Any]:
        return _lib.submit(lib.sbx_sandbox_resume_async, self._live_ptr()), _lib.TAKE_NONE

    def free(self) -> None:
        ptr, self.ptr = self.ptr, None
        if ptr and lib is not None:
            lib.sbx_sandbox_free(ptr)

    def __del__(self) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"<sbx sandbox {self.id}>"


_CSandbox = CSandbox  # the name the provider-protocol adapter below used


def _take_json(f: c_void_p) -> Any:
    return json.loads(_lib.TAKE_STRING(f))


def connect(provider: CProvider, descriptor: Mapping[str, Any]) -> tuple[c_void_p, Any]:
    """sbx_sandbox_connect_async(): (future, take) giving a started CSandbox."""
    # Anything but a mapping reaches C as JSON too, which refuses it (ETYPE)
    # after its capability check, in the reference's order.
    text = json.dumps(dict(descriptor) if isinstance(descriptor, Mapping) else descriptor, default=str)
    f = _lib.submit(lib.sbx_sandbox_connect_async, provider._ptr, text.encode())

    def take(fut: c_void_p) -> CSandbox:
        return CSandbox(_lib.TAKE_SANDBOX(fut), provider)

    return f, take


@atexit.register
def _stop_all_at_exit() -> None:
    """Stops the boxes still alive at exit, all at once: every stop is
    submitted before any is waited for, so 1000 boxes take about as long as
    one (freeing them one by one waited for each stop in turn)."""
    if lib is None:
        return
    with _live_lock:
        boxes = [b for b in _live if b.ptr]
    futures = []
    for box in boxes:
        f = c_void_p()
        err = c_void_p()
        # A connected handle is only released; a box it started is stopped.
        if lib.sbx_sandbox_owned(box.ptr) and lib.sbx_sandbox_stop_async(box.ptr, byref(f), byref(err)) == 0:
            futures.append(f)
        elif err.value:
            lib.sbx_error_free(err)
    for f in futures:
        err = c_void_p()
        lib.sbx_future_wait(f, -1.0, byref(err))
        if err.value:
            lib.sbx_error_free(err)
        lib.sbx_future_free(f)
    for box in boxes:
        box.free()


def spec_to_json(spec: SandboxSpec, *, files: bool = True) -> str:
    """The JSON mapping sbx_spec_from_json() parses (validation already done
    by SandboxSpec; the C side re-checks types)."""
    r = spec.resources
    doc: dict[str, Any] = {
        "image": spec.image,
        "ttl_s": spec.ttl_s,
        "ready_timeout_s": spec.ready_timeout_s,
        "workdir": spec.workdir,
        "env": dict(spec.env or {}),
        "metadata": dict(spec.metadata or {}),
        "resources": {
            "cpu": r.cpu,
            "memory_mib": r.memory_mib,
            "disk_gib": r.disk_gib,
            "gpu": r.gpu,
            "gpu_type": r.gpu_type,
        },
        "entrypoint": list(spec.entrypoint) if spec.entrypoint is not None else None,
        "provider_options": dict(spec.provider_options or {}),
        "ports": list(spec.ports),
    }
    if files:
        from .files import file_to_json  # noqa: PLC0415 ([svc-logs] modes and bytes)

        doc["files"] = {k: file_to_json(v) for k, v in (spec.files or {}).items()}
    # Options may hold paths or other plain objects: send their str().
    return json.dumps(doc, default=str)


def spec_to_c(spec: SandboxSpec, *, files: bool = True) -> c_void_p:
    if not isinstance(spec, SandboxSpec):
        raise TypeError(f"expected a SandboxSpec, got {type(spec).__name__}")
    out = c_void_p()
    _lib.call(lib.sbx_spec_from_json, spec_to_json(spec, files=files).encode(), byref(out))
    return out


def exec_argv(command: Any) -> list[str]:
    """A command given as argv: a non-empty list or tuple of str (not bytes, not one str)."""
    if not isinstance(command, (list, tuple)) or not command or not all(isinstance(w, str) for w in command):
        raise TypeError("command must be a str (run by the box's shell) or a non-empty list of str "
                        f"(an argv, run without a shell), not {command!r:.80}")
    return list(command)


def exec_opts(cwd: Any, env: Mapping[str, Any] | None, timeout_s: Any, user: Any) -> c_void_p:
    o = c_void_p(lib.sbx_exec_opts_new())
    if not o:
        raise MemoryError("out of memory")
    try:
        # Every setter's refusal is raised, not dropped: an env var or a timeout
        # that silently did not apply runs a different command.
        if cwd is not None:
            _lib.check(lib.sbx_exec_opts_set_cwd(o, _lib.cstr(cwd, "cwd")), c_void_p())
        for k, v in (env or {}).items():
            if lib.sbx_exec_opts_set_env(o, _lib.cstr(k, "an env name"), _lib.cstr(v, f"env[{k!r}]")) < 0:
                raise ValueError(
                    f"env[{k!r}] is not valid: a name is not empty and has no '=', one variable "
                    "holds at most 128 KiB and all of them 2 MiB (the kernel's limits for a command)"
                )
        # The protocol's None means no limit (AsyncSandbox passes its 180 s default).
        t = -1.0 if timeout_s is None else float(timeout_s)
        if lib.sbx_exec_opts_set_timeout(o, t) < 0:
            raise ValueError(f"timeout_s must be a finite number of seconds (or None), got {timeout_s!r}")
        if user is not None:
            _lib.check(lib.sbx_exec_opts_set_user(o, _lib.cstr(user, "user")), c_void_p())
    except BaseException:
        lib.sbx_exec_opts_free(o)
        raise
    return o


def _box(handle: SandboxHandle) -> c_void_p:
    raw = getattr(handle, "raw", None)
    if not isinstance(raw, _CSandbox):
        raise TypeError("sandbox handle was not made by an sbx C provider")
    if not raw.ptr:
        raise RuntimeError("Sandbox has not been started")
    return raw.ptr


class CProvider:
    """A provider implemented in C. Subclasses fix `sbx_name` (the C registry
    name); `CProvider.named(name)` makes one. Constructor keyword arguments
    are the provider's config mapping."""

    sbx_name: str = ""
    display_name: str | None = None  # the `name` messages use; the C name if None

    def __init__(self, **config: Any) -> None:
        self._ptr = c_void_p()
        text = json.dumps({self.sbx_name: config}, default=str)
        _lib.call(lib.sbx_provider_new, text.encode(), byref(self._ptr))
        self.name = self.display_name or lib.sbx_provider_name(self._ptr).decode()
        # Optional capabilities exist as attributes only when the C provider
        # has them: the reference detects capabilities from the object's shape.
        if lib.sbx_provider_supports(self._ptr, b"endpoint"):
            self.endpoint = self._endpoint
        if lib.sbx_provider_supports(self._ptr, b"connect"):
            self.serialize_handle = self._serialize_handle
            self.connect = self._connect
        if lib.sbx_provider_supports(self._ptr, b"pty"):
            self.create_pty = self._create_pty
            self.attach_pty = self._attach_pty
        # SupportsSandboxPauseResume (the newer reference) where C can pause (linux, docker).
        if lib.sbx_provider_supports(self._ptr, b"pause"):
            self.pause = self._pause
            self.resume = self._resume
        # [volumes] SupportsSandboxSharedStorage and SupportsSandboxRuntimeRequirements,
        # where the C provider has them (linux): the C call answers ENOTSUP otherwise.
        if self._c_has_volumes():
            self.shared_volume_options = self._shared_volume_options
            self.shared_volume_metadata = self._shared_volume_metadata
            self.validate_runtime_requirements = self._validate_runtime_requirements
            self.configure_runtime = self._configure_runtime
        # [netw] SupportsSandboxNetwork where the C provider has networks (linux).
        if lib.sbx_provider_supports(self._ptr, b"network"):
            self.validate_networking = self._validate_networking
            self.network_address = self._network_address
            self.set_hosts = self._set_hosts
            self.validate_port_forwarding = self._validate_port_forwarding
            self.forward_ports = self._forward_ports

    _classes: dict[str, type[CProvider]] = {}
    # Providers made by shared(), by (class, canonical config); an entry goes
    # when the last sandbox (and user reference) holding its provider is gone.
    _shared: weakref.WeakValueDictionary[tuple[type, str], CProvider] = weakref.WeakValueDictionary()
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, config: Mapping[str, Any]) -> CProvider:
        """The process's provider for this class and `config`, made on first
        use: AsyncSandbox({"linux": {}}) a thousand times runs on one C
        provider (one loop thread, one agent pool). Two configs are the same
        when their JSON with sorted keys is. A provider object made directly
        (create_provider(), or the class) is never shared."""
        key = (cls, json.dumps(dict(config), sort_keys=True, default=str))
        with cls._shared_lock:
            provider = cls._shared.get(key)
            if provider is None:
                provider = cls(**config)
                cls._shared[key] = provider
            return provider

    @classmethod
    def named(cls, name: str) -> type[CProvider]:
        """The (cached) CProvider subclass for C provider `name`."""
        sub = cls._classes.get(name)
        if sub is None:
            title = "".join(p.capitalize() for p in name.replace("-", "_").split("_")) or "Unnamed"
            sub = type(f"{title}Provider", (cls,), {"sbx_name": name, "__module__": __name__})
            cls._classes[name] = sub
        return sub

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr and lib is not None:
            lib.sbx_provider_free(ptr)
            self._ptr = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def _handle(self, ptr: c_void_p) -> SandboxHandle:
        box = _CSandbox(ptr)
        sid = lib.sbx_sandbox_id(ptr)
        return SandboxHandle(sandbox_id=sid.decode() if sid else "", provider_name=self.name, raw=box)

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        # Startup files are the caller's (AsyncSandbox uploads them after create).
        cspec = spec_to_c(spec, files=False)
        sb = c_void_p()
        try:
            _lib.call(lib.sbx_sandbox_new, self._ptr, cspec, byref(sb))
        finally:
            lib.sbx_spec_free(cspec)
        handle = self._handle(sb)
        await _lib.await_future(_lib.submit(lib.sbx_sandbox_start_async, sb, None), _lib.TAKE_NONE)
        sid = lib.sbx_sandbox_id(sb)
        handle.sandbox_id = sid.decode() if sid else ""
        return handle

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = None,
        user: str | int | None = None,
    ) -> SandboxExecResult:
        box = _box(handle)
        opts = exec_opts(cwd, env, timeout_s, user)
        try:
            f = _lib.submit(lib.sbx_sandbox_exec_async, box, _lib.cstr(command, "the command"), opts)
        finally:
            lib.sbx_exec_opts_free(opts)
        return await _lib.await_future(f, _lib.TAKE_EXEC)

    async def upload_file(self, handle: SandboxHandle, source_path: Path | str, target_path: str) -> None:
        f = _lib.submit(
            lib.sbx_sandbox_upload_async, _box(handle), _lib.cpath(source_path), _lib.cstr(target_path, "the target path")
        )
        await _lib.await_future(f, _lib.TAKE_NONE)

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path | str) -> None:
        f = _lib.submit(
            lib.sbx_sandbox_download_async, _box(handle), _lib.cstr(source_path, "the source path"), _lib.cpath(target_path)
        )
        await _lib.await_future(f, _lib.TAKE_NONE)

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        return await _lib.await_future(_lib.submit(lib.sbx_sandbox_status_async, _box(handle)), _lib.TAKE_STATUS)

    async def _pause(self, handle: SandboxHandle) -> None:
        await _lib.await_future(_lib.submit(lib.sbx_sandbox_pause_async, _box(handle)), _lib.TAKE_NONE)

    async def _resume(self, handle: SandboxHandle) -> None:
        await _lib.await_future(_lib.submit(lib.sbx_sandbox_resume_async, _box(handle)), _lib.TAKE_NONE)

    async def close(self, handle: SandboxHandle) -> None:
        raw = handle.raw
        await _lib.await_future(_lib.submit(lib.sbx_sandbox_stop_async, _box(handle)), _lib.TAKE_NONE)
        if isinstance(raw, _CSandbox):
            raw.free()

    async def aclose(self) -> None:
        # The C provider is shared by the sandboxes made from this object and
        # released when the last of them and this object are gone; closing it
        # here would break other sandboxes using the same provider object.
        return None

    async def _endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint:
        f = _lib.submit(lib.sbx_sandbox_endpoint_async, _box(handle), int(port))
        return await _lib.await_future(f, _lib.TAKE_ENDPOINT)

    async def _serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]:
        f = _lib.submit(lib.sbx_sandbox_serialize_async, _box(handle), _lib.cstr(scope))
        return json.loads(await _lib.await_future(f, _lib.TAKE_STRING))

    async def _create_pty(self, handle: SandboxHandle, spec: Any) -> Any:
        from .cpty import open_session  # noqa: PLC0415 (loaded with the first session)

        return await asyncio.to_thread(open_session, lambda: _box(handle), spec)

    async def _attach_pty(
        self, handle: SandboxHandle, session_id: str, *, takeover: bool = True, since: int | None = None
    ) -> Any:
        from .cpty import attach_session  # noqa: PLC0415

        return await asyncio.to_thread(attach_session, lambda: _box(handle), session_id, takeover, since)

    # --- [volumes] shared storage and runtime requirements (docs/volumes.md) ---

    def _c_has_volumes(self) -> bool:
        text, err = c_void_p(), c_void_p()
        rc = lib.sbx_provider_shared_volume_metadata(self._ptr, byref(text), byref(err))
        if rc == 0:
            lib.sbx_free(text)
        else:
            lib.sbx_error_free(err)
        return rc == 0

    def _shared_volume_options(self, source: str | None, target: str, *, read_only: bool = False) -> dict[str, Any]:
        """Provider options {"volumes": [descriptor]} mounting `source` (relative to
        the provider's shared root; None: the root itself) at `target` in the box.
        The C library checks the paths (no "..", absolute target)."""
        text = c_void_p()
        _lib.call(
            lib.sbx_provider_shared_volume_options,
            self._ptr,
            _lib.cstr(source, "the source"),
            _lib.cstr(target, "the target"),
            int(bool(read_only)),
            byref(text),
        )
        return json.loads(_lib.take_string(text))

    def _shared_volume_metadata(self) -> dict[str, str]:
        """Placement settings: boxes share files only on one host and shared root."""
        text = c_void_p()
        _lib.call(lib.sbx_provider_shared_volume_metadata, self._ptr, byref(text))
        return json.loads(_lib.take_string(text))

    def _validate_runtime_requirements(
        self, *, cap_add: tuple[str, ...] = (), shm_size: int | None = None
    ) -> dict[str, str] | None:
        """Checks the capabilities and /dev/shm size (the C library's list says which
        capabilities a box may add, and why the others are refused: PermissionError);
        returns the create-time metadata that applies them, or None."""
        names = [_lib.cstr(c, "a capability name") for c in cap_add]
        arr = (ctypes.c_char_p * (len(names) + 1))(*names, None)
        text = c_void_p()
        _lib.call(
            lib.sbx_provider_validate_runtime_requirements,
            self._ptr,
            arr,
            -1 if shm_size is None else int(shm_size),
            byref(text),
        )
        return json.loads(_lib.take_string(text))

    async def _configure_runtime(
        self, handle: SandboxHandle, *, cap_add: tuple[str, ...] = (), shm_size: int | None = None
    ) -> None:
        """A linux box gets its capabilities and /dev/shm at create, from the
        metadata validate_runtime_requirements returned; a running box cannot
        change them, so this only checks that they are allowed."""
        _box(handle)
        self._validate_runtime_requirements(cap_add=cap_add, shm_size=shm_size)

    def _validate_networking(self) -> None:
        """Raises when boxes cannot be put in networks here (the linux provider
        needs root for them: PermissionError says so)."""
        _lib.call(lib.sbx_provider_validate_networking, self._ptr)

    async def _network_address(self, handle: SandboxHandle) -> str:
        """The address the box's network peers reach it at (C: a file read)."""
        text = c_void_p()
        _lib.call(lib.sbx_sandbox_network_address, _box(handle), byref(text))
        return _lib.take_string(text)

    async def _set_hosts(self, handle: SandboxHandle, hosts: Mapping[str, str]) -> None:
        """Replaces the extra entries of the box's /etc/hosts (after its network
        peers); the C library checks each name and address."""
        text = json.dumps({str(k): v for k, v in dict(hosts).items()})
        _lib.call(lib.sbx_sandbox_set_hosts, _box(handle), text.encode())

    def _validate_port_forwarding(self) -> None:
        """Boxes reach another box's ports on their loopback through the box's own
        network namespace: the same privilege as networks (root)."""
        _lib.call(lib.sbx_provider_validate_networking, self._ptr)

    async def _forward_ports(
        self, handle: SandboxHandle, target_address: str, ports: tuple[int, ...], *, ready_file: str
    ) -> None:
        """Carries the box's own 127.0.0.1:PORT to target_address:PORT for each port
        until cancelled; `ready_file` appears in the box once listening. The C call
        blocks in a thread; cancelling this task ends it through a pipe."""
        box = _box(handle)
        arr = (ctypes.c_int * len(ports))(*[int(p) for p in ports])
        target = _lib.cstr(target_address, "the target address")
        ready = _lib.cstr(ready_file, "the ready file")
        r, w = os.pipe2(os.O_CLOEXEC)
        err = c_void_p()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()

        def forward() -> None:
            # A thread of its own: a forward lasts as long as its task, and must
            # not hold one of the default executor's few workers that long.
            rc = lib.sbx_sandbox_forward_ports(box, target, arr, len(ports), ready, r, byref(err))
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(rc))

        threading.Thread(target=forward, name="sbx-forward-ports", daemon=True).start()
        try:
            rc = await asyncio.shield(fut)
        except asyncio.CancelledError:
            os.write(w, b"x")
            await asyncio.wait([fut])
            rc = fut.result()
            if rc < 0:
                lib.sbx_error_free(err)
            raise
        finally:
            if fut.done():
                os.close(r)
                os.close(w)
        _lib.check(rc, err)

    async def _connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle:
        text = json.dumps(dict(descriptor), default=str)
        f = _lib.submit(lib.sbx_sandbox_connect_async, self._ptr, text.encode())
        return self._handle(await _lib.await_future(f, _lib.TAKE_SANDBOX))
