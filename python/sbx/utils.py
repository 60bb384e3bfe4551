"""rewrite_image (reference-api.md L)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def rewrite_image(image: str | None, rewrites: Iterable[Mapping[str, Any]] | None) -> str | None:
    """Applies the first rewrite whose `from` prefixes the image (`to` + rest).
    A missing `from`/`to` key raises KeyError when that entry is reached."""
    if image is None:
        return None
    for rule in rewrites or ():
        prefix = rule["from"]
        if image.startswith(prefix):
            return rule["to"] + image[len(prefix):]
    return image
