"""The linux provider's named volumes, over the C calls `sbx_provider_volume_*`
(as the CLI's `sbx volume`). The rules (names, the private store, refusing to
remove a volume a running box mounts) are the C library's: these functions
only pass the request and parse the JSON answer (docs/volumes.md).

    from sbx import volumes
    cfg = {"linux": {}}
    volumes.create_volume(cfg, "cache")
    # boxes mount it with provider_options={"volumes": ["cache:/root/.cache"]}
    volumes.list_volumes(cfg)        # [{"name", "created", "mountpoint", "used_by"}]
    volumes.remove_volume(cfg, "cache")

Each call is blocking (ctypes releases the GIL while it waits).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import _lib
from ._lib import lib
from .boxes import _blocking


def create_volume(config: Mapping[str, Any] | str, name: str) -> dict[str, Any]:
    """Makes volume `name` unless it exists; returns {name, created, mountpoint}."""
    return json.loads(_blocking(config, lib.sbx_provider_volume_create, _lib.cstr(name), out=True))


def list_volumes(config: Mapping[str, Any] | str) -> list[dict[str, Any]]:
    """Every volume, each with "used_by": the ids of running boxes mounting it."""
    return json.loads(_blocking(config, lib.sbx_provider_volume_list, out=True))


def inspect_volume(config: Mapping[str, Any] | str, name: str) -> dict[str, Any]:
    """One volume as list_volumes gives it; an unknown name raises (SBX_ENOENT)."""
    return json.loads(_blocking(config, lib.sbx_provider_volume_inspect, _lib.cstr(name), out=True))


def remove_volume(config: Mapping[str, Any] | str, name: str, *, force: bool = False) -> None:
    """Removes volume `name` and its files; refused while a running box mounts
    it (the error names the boxes) unless `force`."""
    _blocking(config, lib.sbx_provider_volume_remove, _lib.cstr(name), int(force), out=False)


__all__ = ["create_volume", "list_volumes", "inspect_volume", "remove_volume"]
