"""sbx's C providers as NeMo Gym sandbox providers.

NeMo Gym finds provider classes through the entry-point group
`nemo_gym.sandbox_providers`; python/pyproject.toml publishes one class per
sbx provider below under the name `sbx_<provider>`, so a Gym config can say

    sandbox:
      sbx_local: {}

Each class speaks Gym's provider protocol (async create, exec, upload_file,
download_file, status, close, aclose; endpoint and serialize_handle/connect
when the C provider has them) in Gym's own classes when nemo_gym is
importable (looked up at first use, see _gym()):

- SandboxHandle, SandboxExecResult, SandboxStatus and SandboxEndpoint are
  converted at the boundary, so Gym's isinstance checks hold;
- SandboxCreateError, SandboxCreateVerificationError and SandboxPtyError are
  raised as classes deriving from Gym's class of that name *and* sbx's, so
  `except SandboxCreateError` catches a failed create whichever package the
  caller imported it from.

Without nemo_gym, sbx's own classes (the same shapes) are used.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from . import base
from ._logging import twin_logger
from .cprovider import CProvider

LOGGER = twin_logger(__name__, "nemo_gym.sandbox.providers.sbx")
T = TypeVar("T")

# Where Gym's value and exception classes live (its api module imports them
# from here too).
GYM_MODULE = "nemo_gym.sandbox.providers"

_gym_lock = threading.Lock()
_gym_module: Any = None
_gym_import_tried = False


def _gym() -> Any:
    """Gym's provider module when Gym is the caller, else None. Detected at
    first use, not at import: when Gym loads this module through its entry
    points it is already imported (sys.modules), and nothing here imports Gym
    when nothing asked for it. One import attempt per process; a Gym
    imported later is still seen through sys.modules."""
    global _gym_module, _gym_import_tried
    mod = _gym_module
    if mod is not None:
        return mod
    mod = sys.modules.get(GYM_MODULE)
    if mod is None:
        with _gym_lock:
            if _gym_import_tried:
                return None
            _gym_import_tried = True
        try:
            mod = importlib.import_module(GYM_MODULE)
        except Exception as exc:  # not installed, or broken: answer in sbx's own classes
            LOGGER.debug("nemo_gym not importable (%s): the adapter uses sbx's own classes", exc)
            return None
    _gym_module = mod
    return mod


def _reset_gym() -> None:
    """Forgets what _gym() found (for tests that install a stand-in Gym)."""
    global _gym_module, _gym_import_tried
    with _gym_lock:
        _gym_module = None
        _gym_import_tried = False


def _to_gym(value: Any) -> Any:
    gym = _gym()
    if gym is None or value is None:
        return value
    if isinstance(value, base.SandboxExecResult) and hasattr(gym, "SandboxExecResult"):
        return gym.SandboxExecResult(value.stdout, value.stderr, value.return_code, value.error_type)
    if isinstance(value, base.SandboxStatus) and hasattr(gym, "SandboxStatus"):
        return gym.SandboxStatus(value.value)
    if isinstance(value, base.SandboxEndpoint) and hasattr(gym, "SandboxEndpoint"):
        return gym.SandboxEndpoint(value.endpoint, dict(value.headers))
    if isinstance(value, base.SandboxHandle) and hasattr(gym, "SandboxHandle"):
        return gym.SandboxHandle(value.sandbox_id, value.provider_name, value.raw)
    return value


# sbx's exceptions that Gym has a class of the same name for, most specific
# first. The rest are builtins (ValueError, TimeoutError, ...) or sbx's
# SandboxError, a RuntimeError, which Gym callers catch as such.
_GYM_ERRORS = ("SandboxCreateVerificationError", "SandboxCreateError", "SandboxPtyError")
_bridges: dict[tuple[type, type], type] = {}


def _bridge_class(theirs: type, ours: type) -> type:
    """A class deriving from Gym's exception and sbx's (same name), so both
    `except nemo_gym...SandboxCreateError` and `except sbx.SandboxCreateError`
    catch it."""
    key = (theirs, ours)
    with _gym_lock:
        cls = _bridges.get(key)
        if cls is None:
            cls = type(theirs.__name__, (theirs, ours), {"__module__": __name__, "__doc__": theirs.__doc__})
            _bridges[key] = cls
        return cls


def gym_exception(exc: BaseException) -> BaseException | None:
    """The exception a NeMo Gym caller catches for sbx exception `exc`, or
    None when `exc` already is one (or Gym is not the caller): an instance of
    a class deriving from Gym's class of the same name and from exc's own
    class, with exc's message, arguments and attributes (`sbx_code`)."""
    gym = _gym()
    if gym is None:
        return None
    for name in _GYM_ERRORS:
        if not isinstance(exc, getattr(base, name)):
            continue
        theirs = getattr(gym, name, None)
        if not isinstance(theirs, type) or not issubclass(theirs, BaseException) or isinstance(exc, theirs):
            return None
        try:
            cls = _bridge_class(theirs, type(exc))
            new = cls(*exc.args)
        except TypeError:  # an incompatible layout or constructor: Gym's class alone
            new = theirs(*exc.args)
        new.__dict__.update(getattr(exc, "__dict__", {}))
        return new
    return None


def _gym_errors(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Raises Gym's exception classes from an adapter method (gym_exception)."""

    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return await method(*args, **kwargs)
        except (base.SandboxCreateError, base.SandboxPtyError) as exc:
            new = gym_exception(exc)
            if new is None:
                raise
            # One traceback: the same frames and cause as sbx's exception.
            raise new.with_traceback(exc.__traceback__) from exc.__cause__

    return wrapper


def _from_gym_spec(spec: Any) -> Any:
    from .base import SandboxResources, SandboxSpec

    if isinstance(spec, SandboxSpec):
        return spec
    r = getattr(spec, "resources", None)
    res = SandboxResources(
        cpu=getattr(r, "cpu", None),
        memory_mib=getattr(r, "memory_mib", None),
        disk_gib=getattr(r, "disk_gib", None),
        gpu=getattr(r, "gpu", None),
        gpu_type=getattr(r, "gpu_type", None),
    )
    return SandboxSpec(
        image=spec.image,
        ttl_s=spec.ttl_s,
        ready_timeout_s=spec.ready_timeout_s,
        workdir=spec.workdir,
        env=dict(spec.env or {}),
        files=dict(spec.files or {}),
        metadata=dict(spec.metadata or {}),
        resources=res,
        entrypoint=spec.entrypoint,
        provider_options=dict(spec.provider_options or {}),
        ports=tuple(getattr(spec, "ports", ()) or ()),
    )


class GymProvider(CProvider):
    """A C provider behind NeMo Gym's provider protocol: Gym's value classes
    in and out, and Gym's exception classes raised (see gym_exception)."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        # Re-bind the optional capabilities to the converting versions.
        if hasattr(self, "endpoint"):
            self.endpoint = self._gym_endpoint
        if hasattr(self, "connect"):
            self.serialize_handle = self._gym_serialize_handle
            self.connect = self._gym_connect

    @_gym_errors
    async def create(self, spec: Any) -> Any:
        return _to_gym(await super().create(_from_gym_spec(spec)))

    @_gym_errors
    async def exec(self, handle: Any, command: str, **kwargs: Any) -> Any:
        return _to_gym(await super().exec(handle, command, **kwargs))

    @_gym_errors
    async def upload_file(self, handle: Any, source_path: Any, target_path: str) -> None:
        await super().upload_file(handle, source_path, target_path)

    @_gym_errors
    async def download_file(self, handle: Any, source_path: str, target_path: Any) -> None:
        await super().download_file(handle, source_path, target_path)

    @_gym_errors
    async def status(self, handle: Any) -> Any:
        return _to_gym(await super().status(handle))

    @_gym_errors
    async def close(self, handle: Any) -> None:
        await super().close(handle)

    @_gym_errors
    async def aclose(self) -> None:
        await super().aclose()

    @_gym_errors
    async def _gym_endpoint(self, handle: Any, port: int) -> Any:
        return _to_gym(await CProvider._endpoint(self, handle, port))

    @_gym_errors
    async def _gym_serialize_handle(self, handle: Any, *, scope: str | None = None) -> dict[str, Any]:
        return await CProvider._serialize_handle(self, handle, scope=scope)

    @_gym_errors
    async def _gym_connect(self, descriptor: Any) -> Any:
        return _to_gym(await CProvider._connect(self, descriptor))


def _adapter(c_name: str) -> type[GymProvider]:
    title = "".join(p.capitalize() for p in c_name.split("_"))
    return type(
        f"{title}Provider",
        (GymProvider,),
        {"sbx_name": c_name, "display_name": f"sbx_{c_name}", "__module__": __name__},
    )


# One class per provider sbx has; each published in Gym's entry-point group
# (pyproject.toml) as the provider lands. _adapter(NAME) makes one for any
# other C provider (a plugin's), as the tests do for "fake".
LocalProvider = _adapter("local")
LinuxProvider = _adapter("linux")
DockerProvider = _adapter("docker")
