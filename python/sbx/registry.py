"""The provider registry (reference-api.md I).

Lookup order: providers registered from Python, then libsbx's own (built in,
registered in C, or plugins on SBX_PLUGIN_PATH), then Python packages that
publish the entry-point group `nemo_gym.sandbox_providers`, so a provider
written for NeMo Gym works here unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from . import _lib
from ._logging import twin_logger
from .base import SandboxProvider
from .cprovider import CProvider

# Logged as sbx.registry and as the reference's nemo_gym.sandbox.providers.registry.
LOGGER = twin_logger(__name__, "nemo_gym.sandbox.providers.registry")

# The reference's type names for what the registry holds.
ProviderClass: TypeAlias = type[SandboxProvider]
ProviderLoader: TypeAlias = Callable[[], ProviderClass]

ENTRY_POINT_GROUP = "nemo_gym.sandbox_providers"

_registered: dict[str, type] = {}
_lock = threading.RLock()
_entry_points: dict[str, Any] | None = None  # name -> EntryPoint, discovered once


def register_provider(name: str, provider_class: type, *, override: bool = False) -> None:
    """Registers a provider class under `name` (shadowing a built-in needs override=True)."""
    if not name:
        raise ValueError("Provider name must be non-empty")
    with _lock:
        if not override and (name in _registered or _lib.c_provider_exists(name)):
            raise ValueError(f"Sandbox provider {name!r} is already registered")
        _registered[name] = provider_class


def _is_own_adapter(ep: Any) -> bool:
    # sbx publishes its C providers to NeMo Gym through this same group; here
    # they are already known under their C names.
    return str(getattr(ep, "value", "")).startswith("sbx.")


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or str(getattr(ep, "value", "?"))


def _discover() -> dict[str, Any]:
    global _entry_points
    with _lock:
        if _entry_points is not None:
            return _entry_points
        from importlib.metadata import entry_points

        found: dict[str, Any] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if _is_own_adapter(ep):
                continue
            prev = found.get(ep.name)
            if prev is not None:
                a, b = sorted([_dist_name(prev), _dist_name(ep)])
                if a != b or prev.value != ep.value:
                    raise ValueError(
                        f"Duplicate sandbox provider entry point {ep.name!r} published by "
                        f"{a!r} and {b!r}. Rename one of them."
                    )
            found[ep.name] = ep
        for name, ep in found.items():
            if name in _registered or _lib.c_provider_exists(name):
                LOGGER.warning(
                    "Sandbox provider entry point %r from %r is shadowed by a built-in or "
                    "registered provider of the same name",
                    name,
                    _dist_name(ep),
                )
        _entry_points = found
        return found


def _reset_entry_points() -> None:
    """Forgets discovered entry points (for tests that install fake ones)."""
    global _entry_points
    with _lock:
        _entry_points = None


def get_provider_class(name: str) -> type:
    """The class for `name`: registered, then C (built in or plugin), then entry points."""
    with _lock:
        cls = _registered.get(name)
    if cls is not None:
        return cls
    if isinstance(name, str) and name and _lib.c_provider_exists(name):
        return CProvider.named(name)
    ep = _discover().get(name)
    if ep is not None:
        return ep.load()
    available = ", ".join(list_providers()) or "<none>"
    raise ValueError(f"Unknown sandbox provider {name!r}. Available providers: {available}")


def list_providers() -> list[str]:
    """Sorted names from every source (runs entry-point discovery)."""
    eps = _discover()
    with _lock:
        names = set(_registered)
    names.update(_lib.list_c_providers())
    names.update(eps)
    return sorted(names)


def _parse(config: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    if len(config) != 1:
        raise ValueError("Sandbox provider config must contain exactly one provider name")
    name, kwargs = next(iter(config.items()))
    if not isinstance(name, str) or not name:
        raise ValueError("Sandbox provider name must be a non-empty string")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"Sandbox provider {name!r} config must be a mapping")
    return name, kwargs


def create_provider(config: Mapping[str, Any]) -> Any:
    """Instantiates a provider from a single-key mapping {name: {kwargs}}:
    a new object each call (never a shared one)."""
    name, kwargs = _parse(config)
    return get_provider_class(name)(**dict(kwargs))


def provider_for_sandbox(config: Mapping[str, Any]) -> Any:
    """The provider a sandbox built from a config mapping runs on: for a C
    provider the process's shared one for that config (CProvider.shared),
    for a Python provider a new object, as create_provider() makes."""
    name, kwargs = _parse(config)
    cls = get_provider_class(name)
    if isinstance(cls, type) and issubclass(cls, CProvider):
        return cls.shared(dict(kwargs))
    return cls(**dict(kwargs))
