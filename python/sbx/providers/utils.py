"""Helpers the reference's providers share (`nemo_gym.sandbox.providers.utils`),
for Python providers written against it."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any


def coerce_config(value: Any, config_cls: type[Any]) -> Any:
    """A `config_cls` instance from a provider's config section: None gives
    the defaults, an instance is kept, a mapping (a YAML block) becomes
    keyword arguments; anything else is a TypeError naming the class."""
    if value is None:
        return config_cls()
    if isinstance(value, config_cls):
        return value
    if isinstance(value, Mapping):
        return config_cls(**value)
    name = config_cls.__name__
    raise TypeError(f"{name} must be a mapping or {name} instance")


def path_under_mount(mount_point: str, path: str) -> str | None:
    """`path` relative to `mount_point` when the absolute `path` is inside
    the mount ("" for the mount itself), else None. Both are normalised
    lexically first ("/a/../b" is "/b"); a relative `path` is never inside."""
    if not path.startswith("/"):
        return None
    mount = posixpath.normpath(mount_point.rstrip("/") or "/")
    target = posixpath.normpath(path)
    if target == mount:
        return ""
    try:
        if posixpath.commonpath([mount, target]) != mount:
            return None
    except ValueError:  # a relative mount point: nothing absolute is under it
        return None
    return target.lstrip("/") if mount == "/" else target[len(mount) + 1:]
