"""Loading libsbx with ctypes, its prototypes, error mapping, and awaiting
its futures from asyncio without threads of our own.

The library is found in this order: $SBX_LIB; ../../build/libsbx.so next to
this package (a source checkout); PREFIX/lib/libsbx.so.0 next to an installed
package; then the dynamic linker's libsbx.so.0.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import ctypes.util
import errno
import logging
import os
import resource
import threading
import time
import weakref
from ctypes import POINTER, byref, c_char_p, c_double, c_int, c_size_t, c_uint, c_ulonglong, c_void_p
from pathlib import Path
from typing import Any, Callable

from .base import (
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxError,
    SandboxExecResult,
    SandboxPtyError,
    SandboxStatus,
)

LOGGER = logging.getLogger("sbx")


def _candidates() -> list[str]:
    out = []
    env = os.environ.get("SBX_LIB")
    if env:
        out.append(env)
    here = Path(__file__).resolve()
    out.append(str(here.parents[2] / "build" / "libsbx.so"))  # a source checkout
    # Installed (PREFIX/lib/pythonX.Y/*-packages/sbx, or any PYDIR under PREFIX):
    # PREFIX/lib/libsbx.so.0, found even before ldconfig has run and under a DESTDIR.
    for anc in here.parents[1:5]:
        out.append(str(anc / "lib" / "libsbx.so.0"))
    found = ctypes.util.find_library("sbx")
    if found:
        out.append(found)
    out.append("libsbx.so.0")
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        if "/" in path and not os.path.exists(path):
            errors.append(f"{path}: not found")
            continue
        try:
            # Global: C provider plugins on SBX_PLUGIN_PATH bind to this libsbx's API
            # (they link no copy of their own), which a local load would hide from them.
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL, use_errno=True)
        except OSError as exc:
            errors.append(str(exc))
    raise ImportError(
        "cannot load libsbx: " + "; ".join(errors) + ". Build it with `make`, set SBX_LIB to its "
        "path, or install it with `make install`."
    )


lib = _load()

_P = c_void_p
_PP = POINTER(c_void_p)
_ERR = POINTER(c_void_p)


def _proto(name: str, restype: Any, *argtypes: Any) -> None:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


for _name, _res, _args in [
    ("sbx_version", c_char_p, ()),
    ("sbx_error_code", c_int, (_P,)),
    ("sbx_error_message", c_char_p, (_P,)),
    ("sbx_error_free", None, (_P,)),
    ("sbx_err_name", c_char_p, (c_int,)),
    ("sbx_strerror", c_char_p, (c_int,)),
    ("sbx_free", None, (_P,)),
    ("sbx_strv_free", None, (_P,)),
    ("sbx_status_name", c_char_p, (c_int,)),
    ("sbx_spec_from_json", c_int, (c_char_p, _PP, _ERR)),
    ("sbx_spec_free", None, (_P,)),
    ("sbx_exec_opts_new", _P, ()),
    ("sbx_exec_opts_free", None, (_P,)),
    ("sbx_exec_opts_set_cwd", c_int, (_P, c_char_p)),
    ("sbx_exec_opts_set_env", c_int, (_P, c_char_p, c_char_p)),
    ("sbx_exec_opts_set_timeout", c_int, (_P, c_double)),
    ("sbx_exec_opts_set_user", c_int, (_P, c_char_p)),
    ("sbx_exec_opts_set_argv", c_int, (_P, POINTER(c_char_p))),
    ("sbx_exec_opts_set_stdin", c_int, (_P, c_char_p, c_size_t)),
    ("sbx_exec_result_stdout", _P, (_P, POINTER(c_size_t))),
    ("sbx_exec_result_stderr", _P, (_P, POINTER(c_size_t))),
    ("sbx_exec_result_return_code", c_int, (_P,)),
    ("sbx_exec_result_error_type", c_char_p, (_P,)),
    ("sbx_exec_result_truncated", c_int, (_P,)),
    ("sbx_exec_result_free", None, (_P,)),
    ("sbx_endpoint_url", c_char_p, (_P,)),
    ("sbx_endpoint_header_count", c_size_t, (_P,)),
    ("sbx_endpoint_header", c_int, (_P, c_size_t, POINTER(c_char_p), POINTER(c_char_p))),
    ("sbx_endpoint_free", None, (_P,)),
    ("sbx_future_wait", c_int, (_P, c_double, _ERR)),
    ("sbx_future_fd", c_int, (_P,)),
    ("sbx_future_done", c_int, (_P,)),
    ("sbx_future_cancel", None, (_P,)),
    ("sbx_future_code", c_int, (_P, _ERR)),
    ("sbx_future_take_exec_result", c_int, (_P, _PP, _ERR)),
    ("sbx_future_take_status", c_int, (_P, POINTER(c_int), _ERR)),
    ("sbx_future_take_endpoint", c_int, (_P, _PP, _ERR)),
    ("sbx_future_take_string", c_int, (_P, _PP, _ERR)),
    ("sbx_future_take_sandbox", c_int, (_P, _PP, _ERR)),
    ("sbx_future_free", None, (_P,)),
    ("sbx_warm_pool_new", c_int, (_P, _P, c_uint, _PP, _ERR)),
    ("sbx_warm_pool_claim", c_int, (_P, _PP, _ERR)),
    ("sbx_warm_pool_stats", c_int, (_P, POINTER(c_uint), POINTER(c_uint), POINTER(c_ulonglong), POINTER(c_ulonglong))),
    ("sbx_warm_pool_last_error", _P, (_P,)),
    ("sbx_warm_pool_free", None, (_P,)),
    ("sbx_provider_new", c_int, (c_char_p, _PP, _ERR)),
    ("sbx_provider_free", None, (_P,)),
    ("sbx_provider_name", c_char_p, (_P,)),
    ("sbx_provider_supports", c_int, (_P, c_char_p)),
    ("sbx_provider_list", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_list_async", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_stop_box", c_int, (_P, c_char_p, _ERR)),
    ("sbx_provider_gc", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_stop_box_async", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_gc_async", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_image_list", c_int, (_P, _PP, _ERR)),
    ("sbx_provider_image_import", c_int, (_P, c_char_p, c_char_p, c_char_p, _PP, _ERR)),
    ("sbx_provider_image_inspect", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_image_tag", c_int, (_P, c_char_p, c_char_p, _ERR)),
    ("sbx_provider_image_prune", c_int, (_P, c_int, _PP, _ERR)),
    ("sbx_provider_image_pull", c_int, (_P, c_char_p, c_char_p, _PP, _ERR)),
    ("sbx_provider_image_remove", c_int, (_P, c_char_p, c_int, _ERR)),
    ("sbx_provider_image_commit", c_int, (_P, c_char_p, c_char_p, c_char_p, _PP, _ERR)),
    ("sbx_list_providers", c_int, (_PP, _ERR)),
    ("sbx_provider_lookup", c_int, (c_char_p, _ERR)),
    ("sbx_sandbox_new", c_int, (_P, _P, _PP, _ERR)),
    ("sbx_sandbox_start_async", c_int, (_P, _P, _PP, _ERR)),
    ("sbx_sandbox_exec_async", c_int, (_P, c_char_p, _P, _PP, _ERR)),
    ("sbx_sandbox_upload_async", c_int, (_P, c_char_p, c_char_p, _PP, _ERR)),
    ("sbx_sandbox_download_async", c_int, (_P, c_char_p, c_char_p, _PP, _ERR)),
    ("sbx_sandbox_status_async", c_int, (_P, _PP, _ERR)),
    ("sbx_sandbox_endpoint_async", c_int, (_P, c_int, _PP, _ERR)),
    ("sbx_sandbox_serialize_async", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_sandbox_connect_async", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_sandbox_stop_async", c_int, (_P, _PP, _ERR)),
    ("sbx_sandbox_pause_async", c_int, (_P, _PP, _ERR)),
    ("sbx_sandbox_resume_async", c_int, (_P, _PP, _ERR)),
    ("sbx_sandbox_id", c_char_p, (_P,)),
    ("sbx_sandbox_owned", c_int, (_P,)),
    ("sbx_sandbox_workdir", c_char_p, (_P,)),
    ("sbx_error_errno", c_int, (_P,)),
    ("sbx_sandbox_free", None, (_P,)),
    # [volumes] linux: named volumes, shared storage, runtime requirements
    ("sbx_provider_volume_create", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_volume_list", c_int, (_P, _PP, _ERR)),
    ("sbx_provider_volume_inspect", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_volume_remove", c_int, (_P, c_char_p, c_int, _ERR)),
    ("sbx_provider_shared_volume_options", c_int, (_P, c_char_p, c_char_p, c_int, _PP, _ERR)),
    ("sbx_provider_shared_volume_metadata", c_int, (_P, _PP, _ERR)),
    ("sbx_provider_validate_runtime_requirements", c_int,
     (_P, POINTER(c_char_p), ctypes.c_longlong, _PP, _ERR)),
    # [netw] linux: box-to-box networks, SupportsSandboxNetwork
    ("sbx_provider_network_create", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_network_list", c_int, (_P, _PP, _ERR)),
    ("sbx_provider_network_inspect", c_int, (_P, c_char_p, _PP, _ERR)),
    ("sbx_provider_network_remove", c_int, (_P, c_char_p, _ERR)),
    ("sbx_provider_validate_networking", c_int, (_P, _ERR)),
    ("sbx_sandbox_network_address", c_int, (_P, _PP, _ERR)),
    ("sbx_sandbox_set_hosts", c_int, (_P, c_char_p, _ERR)),
    ("sbx_sandbox_forward_ports", c_int,
     (_P, c_char_p, POINTER(c_int), ctypes.c_size_t, c_char_p, c_int, _ERR)),
]:
    _proto(_name, _res, *_args)


# --- logging: libsbx's log lines go to the "sbx" logger -----------------------

_LEVELS = {10: logging.DEBUG, 20: logging.INFO, 30: logging.WARNING, 40: logging.ERROR}
_LOG_CB_TYPE = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)


def _on_log(level: int, message: bytes, data: Any) -> None:
    try:
        LOGGER.log(_LEVELS.get(level, logging.WARNING), "%s", message.decode("utf-8", "replace"))
    except Exception:  # a log line must never break the loop thread
        pass


_log_cb = _LOG_CB_TYPE(_on_log)  # kept alive for as long as the library may call it
lib.sbx_set_log_cb.restype = None
lib.sbx_set_log_cb.argtypes = [_LOG_CB_TYPE, c_void_p, c_int]
lib.sbx_set_log_cb(_log_cb, None, 20)


@atexit.register
def _unhook_log() -> None:
    # The interpreter is going away: libsbx threads must not call into it.
    lib.sbx_set_log_cb(_LOG_CB_TYPE(), None, 40)


def version() -> str:
    return lib.sbx_version().decode()


# --- errors -----------------------------------------------------------------

# sbx code name -> Python exception class (reference-api.md "Error mapping").
_EXCEPTIONS: dict[str, type[BaseException]] = {
    "EINVAL": ValueError,
    "ETYPE": TypeError,
    "ESTATE": RuntimeError,
    "ECREATE": SandboxCreateError,
    "EVERIFY": SandboxCreateVerificationError,
    "ENOTSUP": NotImplementedError,
    "ETIMEDOUT": TimeoutError,
    "EPTY": SandboxPtyError,
    # Filled in below: a FileNotFoundError that is also a RuntimeError.
    "EPERM": PermissionError,
    "ENOMEM": MemoryError,
}


class SandboxDescriptorError(OSError, SandboxError):
    """The process ran out of file descriptors (errno EMFILE or ENFILE):
    an OSError with that errno, and a SandboxError (so a RuntimeError)."""


class SandboxFileNotFoundError(FileNotFoundError, SandboxError):
    """A file, box or name that does not exist (sbx code ENOENT), e.g.
    `download("/missing", p)`. The reference's container providers raise
    RuntimeError there (`docker cp` failed) and its local provider
    FileNotFoundError: this is both, so either `except` catches it."""


_EXCEPTIONS["ENOENT"] = SandboxFileNotFoundError


# What to do when descriptors run out (libsbx says the same in its errors).
FD_HINT = (
    "; too many open files: raise the limit (ulimit -n, or RLIMIT_NOFILE) or run fewer sandboxes at once"
)


def exception_for(code: int, message: str, errnum: int = 0) -> BaseException:
    """The Python exception for an sbx code; `sbx_code` names the code.
    Running out of descriptors (errno EMFILE/ENFILE) is never a MemoryError:
    an error without a more precise class becomes an OSError with that errno,
    and its message says what to do."""
    name = lib.sbx_err_name(code).decode()
    cls = _EXCEPTIONS.get(name, SandboxError)
    if errnum in (errno.EMFILE, errno.ENFILE):
        if "ulimit" not in message:
            message += FD_HINT
        if cls in (MemoryError, SandboxError):
            exc = SandboxDescriptorError(errnum, message)
            exc.sbx_code = name  # type: ignore[attr-defined]
            return exc
    exc = cls(message)
    if errnum and isinstance(exc, OSError):
        # As the reference's own OSErrors carry it (str(exc) stays the message).
        exc.errno = errnum
    try:
        exc.sbx_code = name  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return exc


def take_error(code: int, err: c_void_p) -> BaseException:
    """Turns a filled sbx_error out-parameter into an exception (and frees it)."""
    if err.value:
        message = lib.sbx_error_message(err).decode("utf-8", "replace")
        code = lib.sbx_error_code(err) or code
        errnum = lib.sbx_error_errno(err)
        lib.sbx_error_free(err)
        err.value = None
    else:
        message = lib.sbx_strerror(code).decode()
        errnum = 0
    return exception_for(code, message, errnum)


def check(rc: int, err: c_void_p) -> None:
    if rc < 0:
        raise take_error(rc, err)


SBX_ETIMEDOUT = -7


def read_slice(fn: Callable[..., int], lock: threading.Lock, live: Callable[[], c_void_p], stream: int,
               timeout: float) -> bytes | None:
    """One bounded read of a C session or process handle (sbx_pty_read,
    sbx_proc_read): its bytes, or None when nothing came within `timeout`
    seconds. `live()` gives the handle (or raises) under `lock`."""
    buf = ctypes.create_string_buffer(65536)
    n = c_size_t(0)
    err = c_void_p()
    with lock:
        rc = fn(live(), stream, buf, len(buf), timeout, byref(n), None, byref(err))
    if rc == SBX_ETIMEDOUT:
        lib.sbx_error_free(err)
        return None
    check(rc, err)
    return buf.raw[: n.value]


def wait_slice(fn: Callable[..., int], lock: threading.Lock, live: Callable[[], c_void_p],
               timeout: float) -> int | None:
    """One bounded wait of a C session or process handle (sbx_pty_wait,
    sbx_proc_wait): the exit status, or None when it did not end in time."""
    code = c_int(0)
    err = c_void_p()
    with lock:
        rc = fn(live(), timeout, byref(code), byref(err))
    if rc == SBX_ETIMEDOUT:
        lib.sbx_error_free(err)
        return None
    check(rc, err)
    return code.value


def call(fn: Callable[..., int], *args: Any) -> None:
    """Calls an sbx function whose last parameter is `sbx_error **`."""
    err = c_void_p()
    check(fn(*args, byref(err)), err)


def cstr(s: str | os.PathLike[str] | None, what: str = "a text argument") -> bytes | None:
    """Text for a C string parameter. A NUL byte is refused: C would see the
    text cut there and run with another path, name or value."""
    if s is None:
        return None
    b = os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode("utf-8", "surrogateescape")
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL byte, which a C string cannot hold: {s!r}")
    return b


def cpath(p: str | os.PathLike[str], what: str = "a path") -> bytes:
    """A host path for C, refused when it holds a NUL byte (see cstr)."""
    b = os.fsencode(p)
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL byte, which a path cannot hold: {p!r}")
    return b


# --- values -----------------------------------------------------------------


def _bytes_at(ptr: int | None, n: int) -> str | None:
    if not ptr:
        return None
    # Decoded straight from the C buffer (str() takes any buffer): no bytes
    # copy in between, so a 16 MiB result costs its str, not twice that.
    return str((ctypes.c_char * n).from_address(ptr), "utf-8", "replace") if n else ""


def exec_result_from(r: c_void_p) -> SandboxExecResult:
    """Converts (and frees) an sbx_exec_result."""
    try:
        n = c_size_t()
        out = _bytes_at(lib.sbx_exec_result_stdout(r, byref(n)), n.value)
        err = _bytes_at(lib.sbx_exec_result_stderr(r, byref(n)), n.value)
        et = lib.sbx_exec_result_error_type(r)
        res = SandboxExecResult(
            stdout=out,
            stderr=err,
            return_code=lib.sbx_exec_result_return_code(r),
            error_type=et.decode() if et is not None else None,
        )
        if lib.sbx_exec_result_truncated(r):
            # Frozen dataclass: set the (non-field) attribute past its __setattr__.
            object.__setattr__(res, "truncated", True)
        return res
    finally:
        lib.sbx_exec_result_free(r)


def endpoint_from(e: c_void_p) -> SandboxEndpoint:
    """Converts (and frees) an sbx_endpoint."""
    try:
        headers = {}
        k, v = c_char_p(), c_char_p()
        for i in range(lib.sbx_endpoint_header_count(e)):
            if lib.sbx_endpoint_header(e, i, byref(k), byref(v)) == 0:
                headers[k.value.decode()] = v.value.decode()
        return SandboxEndpoint(lib.sbx_endpoint_url(e).decode(), headers)
    finally:
        lib.sbx_endpoint_free(e)


def take_string(ptr: c_void_p) -> str:
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.sbx_free(ptr)


def list_c_providers() -> list[str]:
    names = c_void_p()
    call(lib.sbx_list_providers, byref(names))
    try:
        arr = ctypes.cast(names, POINTER(c_char_p))
        out = []
        i = 0
        while arr[i] is not None:
            out.append(arr[i].decode())
            i += 1
        return out
    finally:
        lib.sbx_strv_free(names)


def c_provider_exists(name: str) -> bool:
    err = c_void_p()
    rc = lib.sbx_provider_lookup(name.encode(), byref(err))
    if err.value:
        lib.sbx_error_free(err)
    return rc == 0


def status_from(code: int) -> SandboxStatus:
    """The Python status for a C one (the newer reference's six values)."""
    try:
        return SandboxStatus(lib.sbx_status_name(code).decode())
    except ValueError:
        return SandboxStatus.UNKNOWN


# --- futures ----------------------------------------------------------------

# What to take out of a completed future, by result kind.
def _take_none(f: c_void_p) -> None:
    call(lib.sbx_future_code, f)


def _take_exec(f: c_void_p) -> SandboxExecResult:
    r = c_void_p()
    call(lib.sbx_future_take_exec_result, f, byref(r))
    return exec_result_from(r)


def _take_status(f: c_void_p) -> SandboxStatus:
    s = c_int()
    call(lib.sbx_future_take_status, f, byref(s))
    return status_from(s.value)


def _take_endpoint(f: c_void_p) -> SandboxEndpoint:
    e = c_void_p()
    call(lib.sbx_future_take_endpoint, f, byref(e))
    return endpoint_from(e)


def _take_string(f: c_void_p) -> str:
    s = c_void_p()
    call(lib.sbx_future_take_string, f, byref(s))
    return take_string(s)


def _take_sandbox(f: c_void_p) -> c_void_p:
    sb = c_void_p()
    call(lib.sbx_future_take_sandbox, f, byref(sb))
    return sb


TAKE_NONE = _take_none
TAKE_EXEC = _take_exec
TAKE_STATUS = _take_status
TAKE_ENDPOINT = _take_endpoint
TAKE_STRING = _take_string
TAKE_SANDBOX = _take_sandbox


def submit(start: Callable[..., int], *args: Any) -> c_void_p:
    """Calls an `_async` sbx function; returns its future (raises on refusal)."""
    f = c_void_p()
    err = c_void_p()
    check(start(*args, byref(f), byref(err)), err)
    return f


async def await_future(f: c_void_p, take: Callable[[c_void_p], Any]) -> Any:
    """Awaits an sbx future on the running asyncio loop, then takes its result
    and frees it. The future's descriptor is watched with loop.add_reader, so
    no thread is involved. If the awaiting task is cancelled, the operation is
    cancelled too and awaited to its end (what it started is gone) before
    CancelledError propagates."""
    try:
        if not lib.sbx_future_done(f):
            await _wait_fd(f)
        return take(f)
    finally:
        lib.sbx_future_free(f)


# The blocking facade waits in slices this long, so Python runs signal
# handlers (Ctrl-C) between them; the GIL is released during each.
_WAIT_SLICE_S = 0.25


def wait_future(f: c_void_p, take: Callable[[c_void_p], Any], *, timeout_s: float,
                on_timeout: Callable[[], BaseException]) -> Any:
    """The blocking form of await_future, for the sync Sandbox: waits in the
    calling thread with sbx_future_wait (what the C blocking calls do), then
    takes the result and frees the future. Past `timeout_s`, or when a signal
    handler raises (Ctrl-C), the operation is cancelled and waited to its end
    (what it started is gone); then on_timeout()'s exception, or the
    handler's, is raised."""
    try:
        deadline = time.monotonic() + timeout_s
        try:
            while not lib.sbx_future_done(f):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise on_timeout()
                err = c_void_p()
                lib.sbx_future_wait(f, min(left, _WAIT_SLICE_S), byref(err))
                if err.value:
                    lib.sbx_error_free(err)
        except BaseException:
            lib.sbx_future_cancel(f)
            err = c_void_p()
            lib.sbx_future_wait(f, -1.0, byref(err))
            if err.value:
                lib.sbx_error_free(err)
            raise
        return take(f)
    finally:
        lib.sbx_future_free(f)


_warned_no_fd = False


def _warn_no_fd(e: int) -> None:
    global _warned_no_fd
    if not _warned_no_fd:
        _warned_no_fd = True
        LOGGER.warning("cannot make a descriptor to await an sbx operation (%s): polling for it "
                       "instead%s", os.strerror(e), FD_HINT if e in (errno.EMFILE, errno.ENFILE) else "")


def _fd_budget() -> int:
    """How many futures may hold an eventfd at once: a quarter of the soft
    RLIMIT_NOFILE, so operations in flight leave the rest to what the
    operations themselves open (agent sockets, a pidfd per stopping box,
    record files); the others are polled for (_Poller)."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 512
    return 512 if soft == resource.RLIM_INFINITY else max(16, soft // 4)


_fds_held = 0  # futures holding an eventfd now (all loops)
_fds_lock = threading.Lock()


class _Poller:
    """One task per event loop that watches every future awaited without a
    descriptor: it checks them all, every 0.5 ms while they complete and up
    to every 10 ms while none does."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: dict[int, tuple[c_void_p, asyncio.Future[None]]] = {}
        self.task: asyncio.Task[None] | None = None

    def add(self, f: c_void_p) -> asyncio.Future[None]:
        w: asyncio.Future[None] = self.loop.create_future()
        self.waiting[id(w)] = (f, w)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run())
        return w

    async def _run(self) -> None:
        delay = 0.0005
        while self.waiting:
            await asyncio.sleep(delay)
            ready = [k for k, (f, w) in self.waiting.items() if w.done() or lib.sbx_future_done(f)]
            for k in ready:
                _, w = self.waiting.pop(k)
                if not w.done():
                    w.set_result(None)
            delay = 0.0005 if ready else min(delay * 2, 0.01)


_pollers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Poller] = weakref.WeakKeyDictionary()


async def _poll(f: c_void_p) -> None:
    """Awaits the future without a descriptor; cancellation is handled as in
    _wait_fd (the operation is cancelled and awaited to its end)."""
    loop = asyncio.get_running_loop()
    poller = _pollers.get(loop)
    if poller is None:
        poller = _pollers[loop] = _Poller(loop)
    try:
        await poller.add(f)
    except asyncio.CancelledError:
        lib.sbx_future_cancel(f)
        while not lib.sbx_future_done(f):
            try:
                await poller.add(f)
            except asyncio.CancelledError:
                pass
        raise


async def _wait_fd(f: c_void_p) -> None:
    global _fds_held
    with _fds_lock:
        over = _fds_held >= _fd_budget()  # read each time: the limit may change
        if not over:
            _fds_held += 1
    if over:
        # Many operations in flight: the rest wait without a descriptor.
        await _poll(f)
        return
    try:
        await _wait_fd_held(f)
    finally:
        with _fds_lock:
            _fds_held -= 1


async def _wait_fd_held(f: c_void_p) -> None:
    loop = asyncio.get_running_loop()
    fd = lib.sbx_future_fd(f)
    if fd < 0:
        # No descriptor left to watch it with: the operation was accepted and
        # runs on, so poll for its end rather than abandon it (a stop() must
        # still work when the process is out of descriptors).
        _warn_no_fd(ctypes.get_errno())
        await _poll(f)
        return
    waiter: list[asyncio.Future[None]] = [loop.create_future()]

    def ready() -> None:
        loop.remove_reader(fd)
        if not waiter[0].done():
            waiter[0].set_result(None)

    loop.add_reader(fd, ready)
    try:
        await waiter[0]
    except asyncio.CancelledError:
        lib.sbx_future_cancel(f)
        while not lib.sbx_future_done(f):
            waiter[0] = loop.create_future()
            loop.add_reader(fd, ready)
            try:
                await waiter[0]
            except asyncio.CancelledError:
                pass  # already cancelling: keep waiting for the operation to end
        raise
    finally:
        loop.remove_reader(fd)
