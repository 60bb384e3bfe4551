"""The linux provider's box-to-box networks, over the C calls
`sbx_provider_network_*` (as the CLI's `sbx network`). The rules (names,
subnets, root, refusing to remove a network boxes are in) are the C
library's: these functions only pass the request and parse the JSON answer
(docs/networking.md, "Box-to-box networks").

    from sbx import networks
    cfg = {"linux": {}}
    networks.create_network(cfg, "ep1")
    # boxes join it with provider_options={"network": "ep1"}
    networks.list_networks(cfg)      # [{"name", "subnet", "created", "boxes"}]
    networks.remove_network(cfg, "ep1")

Each call is blocking (ctypes releases the GIL while it waits).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import _lib
from ._lib import lib
from .boxes import _blocking


def create_network(config: Mapping[str, Any] | str, name: str) -> dict[str, Any]:
    """Makes network `name` unless it exists (root); returns {name, subnet, created, boxes}."""
    return json.loads(_blocking(config, lib.sbx_provider_network_create, _lib.cstr(name), out=True))


def list_networks(config: Mapping[str, Any] | str) -> list[dict[str, Any]]:
    """Every network, each with "boxes": the ids of the boxes in it."""
    return json.loads(_blocking(config, lib.sbx_provider_network_list, out=True))


def inspect_network(config: Mapping[str, Any] | str, name: str) -> dict[str, Any]:
    """One network as list_networks gives it; an unknown name raises (SBX_ENOENT)."""
    return json.loads(_blocking(config, lib.sbx_provider_network_inspect, _lib.cstr(name), out=True))


def remove_network(config: Mapping[str, Any] | str, name: str) -> None:
    """Removes network `name`; refused while boxes are in it (the error names them)."""
    _blocking(config, lib.sbx_provider_network_remove, _lib.cstr(name), out=False)


__all__ = ["create_network", "list_networks", "inspect_network", "remove_network"]
