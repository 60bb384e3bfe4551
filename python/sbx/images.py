"""A provider's images (the linux provider's store), over the C calls
`sbx_provider_image_*`: pull, list, import, inspect, tag, remove, prune,
commit. As the CLI's `sbx image`, these only pass the request and parse the JSON answer; the
rules are the C library's (docs/images.md).

    from sbx import images
    cfg = {"linux": {}}
    images.import_image(cfg, "app", "/srv/oci/app")          # an OCI layout
    info = images.inspect_image(cfg, "app")
    info["config"]["ExposedPorts"]                             # {"8080/tcp": {}}
    images.tag_image(cfg, "app", "app-stable")
    images.pull_image(cfg, "registry.example:5000/org/env:1")   # from a registry

Each call is blocking (ctypes releases the GIL while it waits).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from . import _lib
from ._lib import lib
from .boxes import _blocking


def pull_image(
    config: Mapping[str, Any] | str, ref: str, *, platform: str | None = None
) -> dict[str, Any]:
    """Pulls Docker reference `ref` ("python:3.12", "host:5000/org/env@sha256:...")
    into the provider's store under its canonical name, as `sbx image pull`;
    returns the image's dict (name, digest, size, created, source, reference).
    Auth, TLS, mirrors and insecure registries come from the provider's
    config (docs/images.md, "Pulling")."""
    opts = json.dumps({"platform": platform}) if platform else None
    return json.loads(
        _blocking(config, lib.sbx_provider_image_pull, _lib.cstr(ref), _lib.cstr(opts), out=True)
    )


def list_images(config: Mapping[str, Any] | str) -> list[dict[str, Any]]:
    """Every named image: dicts with name, digest, size, created, source."""
    return json.loads(_blocking(config, lib.sbx_provider_image_list, out=True))


def import_image(
    config: Mapping[str, Any] | str, name: str, source: str | os.PathLike[str]
) -> dict[str, Any]:
    """Makes image `name` from a local source (tarball, directory, OCI layout)."""
    return json.loads(
        _blocking(
            config,
            lib.sbx_provider_image_import,
            _lib.cstr(name),
            _lib.cstr(source),
            None,
            out=True,
        )
    )


def inspect_image(config: Mapping[str, Any] | str, name: str) -> dict[str, Any]:
    """One image: name, digest, size, created, source, layers and its OCI
    config (Env, WorkingDir, User, Entrypoint, Cmd, ExposedPorts, Labels)
    or None. An unknown name raises SandboxError (SBX_ENOENT)."""
    return json.loads(_blocking(config, lib.sbx_provider_image_inspect, _lib.cstr(name), out=True))


def tag_image(config: Mapping[str, Any] | str, src: str, name: str) -> None:
    """Gives image `src` the second name `name` (as `docker tag`)."""
    _blocking(config, lib.sbx_provider_image_tag, _lib.cstr(src), _lib.cstr(name), out=False)


def remove_image(config: Mapping[str, Any] | str, name: str, *, force: bool = False) -> None:
    """Forgets image `name` (and its layers no other image has)."""
    _blocking(config, lib.sbx_provider_image_remove, _lib.cstr(name), int(force), out=False)


def prune_images(config: Mapping[str, Any] | str, *, dry_run: bool = False) -> list[str]:
    """Removes image records no name points at, layers no image has and what
    dead imports left (as `sbx image prune`); returns what went (or, with
    dry_run, what would): "layer sha256:...", "image sha256:...", "temporary"."""
    return json.loads(_blocking(config, lib.sbx_provider_image_prune, int(dry_run), out=True))


def commit_image(
    config: Mapping[str, Any] | str,
    box_id: str,
    name: str,
    changes: list[str] | None = None,
    *,
    pause: bool = True,
) -> dict[str, Any]:
    """Makes image `name` of running box `box_id`'s changes over its image (as
    `sbx commit`); `changes` are Dockerfile config instructions ("ENV K=V",
    "WORKDIR /d", "USER u", "ENTRYPOINT [...]", "CMD [...]"). Returns
    {"id", "name", "layer", "layers", "paused", "size"}."""
    opts = json.dumps({"changes": list(changes or []), "pause": bool(pause)})
    return json.loads(
        _blocking(
            config,
            lib.sbx_provider_image_commit,
            _lib.cstr(box_id),
            _lib.cstr(name),
            _lib.cstr(opts),
            out=True,
        )
    )


__all__ = ["pull_image", "list_images", "import_image", "inspect_image", "tag_image", "remove_image",
           "prune_images", "commit_image"]
