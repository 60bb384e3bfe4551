"""rewrite_image (reference-api.md L)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def rewrite_image(image: str | None, rewrites: Iterable[Mapping[str, Any]]) -> str | None:
    """Applies the first rewrite whose `from` prefixes the image (`to` + rest).

    As the reference: a None image is None whatever the rewrites; otherwise
    `rewrites` must be iterable (None is a TypeError: a config that forgot
    its rewrite list is refused, not read as "no rewrites"), and an entry
    missing `from` or `to` raises KeyError when it is reached."""
    if image is None:
        return None
    if rewrites is None:
        raise TypeError(
            "rewrite_image() needs a list of {'from': ..., 'to': ...} mappings as rewrites "
            "('NoneType' object is not iterable); pass [] for no rewrites"
        )
    for rule in rewrites:
        prefix = rule["from"]
        replacement = rule["to"]
        if image.startswith(prefix):
            return replacement + image[len(prefix):]
    return image
