"""Sandbox transfer helpers (the newer reference's ``transfer`` module).

Directories and archives move as tar streams through the box's sbx-agent,
which reads and writes them itself: the box needs neither a shell nor tar
(docs/transfer.md). Every box path is resolved inside the box's root; a
relative one is relative to the sandbox's workdir. Modes and mtimes are kept;
owners only with ``preserve_owner=True``. Links stay links and are never
followed, in either direction.

Each function takes a ``Sandbox`` (and blocks) or an ``AsyncSandbox`` (and
returns an awaitable that runs the transfer on a worker thread).

Errors (the reference's taxonomy):

- ``SandboxTransferError``: the transfer failed inside the sandbox (a name
  with ``..``, a link in the way, a limit, a full disk, a missing directory).
- ``SandboxProbeError``: the sandbox did not answer (its agent went away,
  a timeout).
- ``SandboxUnavailableError``: the provider could not run it at all (no
  sbx-agent in its boxes); ``error_type`` says why.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint, c_void_p, string_at
from pathlib import Path
from typing import Any, Callable

from . import _lib
from ._lib import lib

__all__ = [
    "SandboxTransferError",
    "SandboxProbeError",
    "SandboxUnavailableError",
    "upload_dir",
    "download_dir",
    "upload_path",
    "download_path",
    "upload_archive",
    "download_archive",
    "remote_kind",
    "write_file",
    "read_file",
    "tar_extract_command",
    "PRESERVE_OWNER",
    "READ_FILE_DEFAULT_MAX",
]

PRESERVE_OWNER = 1
READ_FILE_DEFAULT_MAX = 64 << 20


class SandboxTransferError(RuntimeError):
    """The transfer failed inside the sandbox."""


class SandboxProbeError(RuntimeError):
    """The sandbox did not answer (lost agent or container, timeout)."""


class SandboxUnavailableError(RuntimeError):
    """The provider could not run the transfer at all (Gym's outage, not the task's)."""

    def __init__(self, message: str, error_type: str = "unsupported") -> None:
        super().__init__(message)
        self.error_type = error_type


# An ETRANSFER raised by any call (not only these) is a SandboxTransferError.
_lib._EXCEPTIONS["ETRANSFER"] = SandboxTransferError

_P = c_void_p
_ERR = POINTER(c_void_p)
for _name, _res, _args in (
    ("sbx_sandbox_upload_dir", c_int, (_P, c_char_p, c_char_p, c_uint, _ERR)),
    ("sbx_sandbox_download_dir", c_int, (_P, c_char_p, c_char_p, c_uint, _ERR)),
    ("sbx_sandbox_upload_archive", c_int, (_P, c_int, c_char_p, c_uint, _ERR)),
    ("sbx_sandbox_download_archive", c_int, (_P, c_char_p, c_int, _ERR)),
    ("sbx_sandbox_remote_kind", c_int, (_P, c_char_p, POINTER(c_char_p), _ERR)),
    ("sbx_sandbox_write_file", c_int, (_P, c_char_p, c_char_p, c_size_t, c_uint, _ERR)),
    ("sbx_sandbox_read_file", c_int, (_P, c_char_p, c_size_t, POINTER(c_void_p), POINTER(c_size_t), _ERR)),
    ("sbx_sandbox_download", c_int, (_P, c_char_p, c_char_p, _ERR)),
    ("free", None, (c_void_p,)),
):
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def _error(rc: int, err: c_void_p) -> BaseException:
    name = lib.sbx_err_name(rc).decode()
    if name in ("ETRANSFER", "EIO", "ETIMEDOUT", "ENOTSUP", "EPROVIDER"):
        msg = lib.sbx_error_message(err).decode("utf-8", "replace") if err.value else name
        if err.value:
            lib.sbx_error_free(err)
            err.value = None
        if name == "ETRANSFER":
            exc: BaseException = SandboxTransferError(msg)
        elif name in ("EIO", "ETIMEDOUT"):
            exc = SandboxProbeError(msg)
        else:
            exc = SandboxUnavailableError(msg, "unsupported" if name == "ENOTSUP" else "provider")
        exc.sbx_code = name  # type: ignore[attr-defined]
        return exc
    return _lib.take_error(rc, err)


def _call(fn: Callable[..., int], *args: Any) -> None:
    err = c_void_p()
    rc = fn(*args, byref(err))
    if rc < 0:
        raise _error(rc, err)


def _ptr(sandbox: Any) -> c_void_p:
    inner = getattr(sandbox, "_async_sandbox", sandbox)
    csb = getattr(inner, "_csb", None)
    if csb is None:
        raise SandboxUnavailableError(
            "this sandbox's provider is not a C provider with sbx-agent boxes; "
            "directory and byte transfers need one (linux)",
            "unsupported",
        )
    inner._require_handle()
    return csb.ptr


def _run(sandbox: Any, fn: Callable[[], Any]) -> Any:
    from .api import AsyncSandbox

    if isinstance(sandbox, AsyncSandbox):
        return asyncio.to_thread(fn)
    return fn()


def upload_dir(sandbox: Any, local_dir: str | os.PathLike[str], remote_dir: str, *, preserve_owner: bool = False) -> Any:
    """Copies the contents of host directory ``local_dir`` into ``remote_dir``
    (created; same-named entries replaced, others kept)."""

    def go() -> None:
        _call(lib.sbx_sandbox_upload_dir, _ptr(sandbox), _lib.cpath(local_dir), _lib.cstr(remote_dir),
              PRESERVE_OWNER if preserve_owner else 0)

    return _run(sandbox, go)


def download_dir(sandbox: Any, remote_dir: str, local_dir: str | os.PathLike[str], *, preserve_owner: bool = False) -> Any:
    """Copies the contents of box directory ``remote_dir`` into host directory ``local_dir`` (created)."""

    def go() -> None:
        _call(lib.sbx_sandbox_download_dir, _ptr(sandbox), _lib.cstr(remote_dir), _lib.cpath(local_dir),
              PRESERVE_OWNER if preserve_owner else 0)

    return _run(sandbox, go)


def upload_archive(sandbox: Any, archive: str | os.PathLike[str] | bytes, remote_dir: str, *, preserve_owner: bool = False) -> Any:
    """Replays a tar archive (a host path, or its bytes) into ``remote_dir``
    byte for byte (e.g. an agent's kept archive into a verifier's box)."""

    def go() -> None:
        if isinstance(archive, (bytes, bytearray, memoryview)):
            r, w = os.pipe()
            import threading

            def feed() -> None:
                try:
                    _write_all(w, bytes(archive))
                except OSError:
                    pass
                finally:
                    os.close(w)

            t = threading.Thread(target=feed, daemon=True)
            t.start()
            try:
                _call(lib.sbx_sandbox_upload_archive, _ptr(sandbox), r, _lib.cstr(remote_dir),
                      PRESERVE_OWNER if preserve_owner else 0)
            finally:
                os.close(r)
                t.join()
            return
        fd = os.open(os.fspath(archive), os.O_RDONLY | os.O_CLOEXEC)
        try:
            _call(lib.sbx_sandbox_upload_archive, _ptr(sandbox), fd, _lib.cstr(remote_dir),
                  PRESERVE_OWNER if preserve_owner else 0)
        finally:
            os.close(fd)

    return _run(sandbox, go)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def download_archive(sandbox: Any, remote_dir: str, local_archive: str | os.PathLike[str]) -> Any:
    """Writes a tar archive of box directory ``remote_dir`` to host file ``local_archive``."""

    def go() -> None:
        fd = os.open(os.fspath(local_archive), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _call(lib.sbx_sandbox_download_archive, _ptr(sandbox), _lib.cstr(remote_dir), fd)
        finally:
            os.close(fd)

    return _run(sandbox, go)


def remote_kind(sandbox: Any, remote_path: str) -> Any:
    """``"file"``, ``"dir"``, ``"other"`` or None when nothing is at ``remote_path``."""

    return _run(sandbox, lambda: _remote_kind_sync(sandbox, remote_path))


def upload_path(sandbox: Any, local: str | os.PathLike[str], remote: str, *, preserve_owner: bool = False) -> Any:
    """A host file (upload) or directory (upload_dir) to ``remote``."""
    if Path(local).is_dir():
        return upload_dir(sandbox, local, remote, preserve_owner=preserve_owner)
    from .api import AsyncSandbox

    if isinstance(sandbox, AsyncSandbox):
        return sandbox.upload(local, remote)
    return sandbox.upload(local, remote)


def download_path(sandbox: Any, remote: str, local: str | os.PathLike[str], *, preserve_owner: bool = False) -> Any:
    """A box file (download) or directory (download_dir), as ``remote_kind`` says."""

    def go() -> None:
        kind = _remote_kind_sync(sandbox, remote)
        if kind is None:
            raise SandboxTransferError(f"downloading '{remote}': no such file or directory in the sandbox")
        if kind == "dir":
            _call(lib.sbx_sandbox_download_dir, _ptr(sandbox), _lib.cstr(remote), _lib.cpath(local),
                  PRESERVE_OWNER if preserve_owner else 0)
        else:
            _download_file(sandbox, remote, local)

    return _run(sandbox, go)


def _remote_kind_sync(sandbox: Any, remote_path: str) -> str | None:
    k = c_char_p()
    _call(lib.sbx_sandbox_remote_kind, _ptr(sandbox), _lib.cstr(remote_path), byref(k))
    return k.value.decode() if k.value is not None else None


def _download_file(sandbox: Any, remote: str, local: str | os.PathLike[str]) -> None:
    _call(lib.sbx_sandbox_download, _ptr(sandbox), _lib.cstr(remote), _lib.cpath(local))


def write_file(sandbox: Any, remote_path: str, data: bytes | str, mode: int = 0o644) -> Any:
    """Writes ``data`` (bytes, or text as UTF-8) to ``remote_path`` with ``mode``
    (parents made, replaced atomically), without a local file."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)

    def go() -> None:
        _call(lib.sbx_sandbox_write_file, _ptr(sandbox), _lib.cstr(remote_path), raw, len(raw), mode)

    return _run(sandbox, go)


def read_file(sandbox: Any, remote_path: str, max_bytes: int = READ_FILE_DEFAULT_MAX) -> Any:
    """The bytes of box file ``remote_path`` (at most ``max_bytes``, else SandboxTransferError)."""

    def go() -> bytes:
        out = c_void_p()
        n = c_size_t()
        _call(lib.sbx_sandbox_read_file, _ptr(sandbox), _lib.cstr(remote_path), max_bytes, byref(out), byref(n))
        try:
            return string_at(out.value, n.value) if n.value else b""
        finally:
            lib.free(out)

    return _run(sandbox, go)


def tar_extract_command(archive_path: str, dest_dir: str) -> str:
    """A shell command extracting ``archive_path`` into ``dest_dir`` with the
    box's own tar (GNU or BusyBox), for boxes without sbx-agent."""
    a, d = shlex.quote(archive_path), shlex.quote(dest_dir)
    return f"mkdir -p {d} && tar -xf {a} -C {d}"
