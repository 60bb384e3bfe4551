"""Resolving a `sandbox_provider` reference into a provider config
(reference-api.md J). Pure Python: it works on the caller's (possibly
OmegaConf) objects, which the C resolver cannot see."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Reserved keys of a sandbox block that are not the provider's config (the
# reference's names; DEFAULT_METADATA_KEY / RESERVED_KEYS are sbx's earlier ones).
SANDBOX_BLOCK_DEFAULT_METADATA_KEY = "default_metadata"
SANDBOX_BLOCK_RESERVED_KEYS = frozenset({SANDBOX_BLOCK_DEFAULT_METADATA_KEY})
DEFAULT_METADATA_KEY = SANDBOX_BLOCK_DEFAULT_METADATA_KEY
RESERVED_KEYS = SANDBOX_BLOCK_RESERVED_KEYS


def _plain(value: Any) -> Any:
    """A plain dict for mappings, including OmegaConf DictConfig (resolved)."""
    try:
        from omegaconf import DictConfig, OmegaConf  # type: ignore[import-not-found]
    except ImportError:
        DictConfig = None
    if DictConfig is not None and isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _provider_keys(block: Mapping[str, Any]) -> list[Any]:
    return [k for k in block if k not in RESERVED_KEYS]


def _candidates(named: Mapping[str, Any] | None) -> list[str]:
    if not named:
        return []
    out = []
    for key, value in named.items():
        plain = _plain(value)
        if isinstance(plain, Mapping) and len(_provider_keys(plain)) == 1:
            out.append(str(key))
    return sorted(out)


def _block(ref: Any, named: Mapping[str, Any] | None) -> tuple[Any, str]:
    if isinstance(ref, str):
        if not ref:
            raise ValueError("Sandbox provider reference must be a non-empty string")
        block = named.get(ref) if named is not None else None
        if block is None:
            cands = ", ".join(repr(n) for n in _candidates(named)) or "(none)"
            raise ValueError(
                f"Sandbox provider reference {ref!r} is not defined in the merged config. "
                f"Define a top-level '{ref}:' block (e.g. via "
                f"nemo_gym/sandbox/providers/<provider>/configs/<provider>.yaml) and include it in "
                f"your config_paths. Available sandbox configs: {cands}"
            )
        return _plain(block), f"reference {ref!r}"
    if isinstance(ref, Mapping):
        return _plain(ref), "inline sandbox_provider config"
    raise TypeError(
        "sandbox_provider must be a name reference (str) or a single-key provider mapping, "
        f"got {type(ref).__name__}"
    )


def resolve_provider_config(
    sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A new {provider_name: config} dict, without reserved keys."""
    block, source = _block(sandbox_provider, named_configs)
    if not isinstance(block, Mapping):
        raise ValueError(f"Sandbox provider config from {source} must be a mapping, got: {block!r}")
    keys = _provider_keys(block)
    if len(keys) != 1:
        raise ValueError(
            f"Sandbox provider config from {source} must have exactly one provider key "
            f"{{provider_name: config}}, got keys: {keys!r}"
        )
    return {keys[0]: block[keys[0]]}


def resolve_provider_metadata(
    sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A copy of the block's default_metadata ({} when absent or empty)."""
    block, source = _block(sandbox_provider, named_configs)
    if not isinstance(block, Mapping):
        raise ValueError(f"Sandbox provider config from {source} must be a mapping, got: {block!r}")
    md = block.get(DEFAULT_METADATA_KEY) or {}
    if not isinstance(md, Mapping):
        raise ValueError(f"Sandbox '{DEFAULT_METADATA_KEY}' from {source} must be a mapping, got: {md!r}")
    return dict(md)
