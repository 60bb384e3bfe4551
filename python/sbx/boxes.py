"""Boxes by id, whoever made them: list, stop, clean up (what E2B's and
Modal's `Sandbox.list` give their users), over the C box registry
(`sbx_provider_list`, `sbx_provider_stop_box`, `sbx_provider_gc`). The rules
(what a label filter matches, what gc collects) are the C library's: these
functions only pass the request and parse the JSON answer.

    import sbx
    for box in sbx.list_sandboxes({"linux": {}}, labels={"run_id": "r42"}):
        print(box["id"], box["status"])
    sbx.cleanup_sandboxes({"linux": {}}, run_id="r42")   # what a crashed run left

Each has an awaitable twin (`alist_sandboxes`, ...) for asyncio code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from ctypes import byref, c_void_p
from typing import Any

from . import _lib
from ._lib import lib


def _provider(config: Mapping[str, Any] | str) -> c_void_p:
    text = config if isinstance(config, str) else json.dumps(dict(config))
    p = c_void_p()
    err = c_void_p()
    _lib.check(lib.sbx_provider_new(_lib.cstr(text), byref(p), byref(err)), err)
    return p


def _labels(labels: Mapping[str, str] | None, run_id: str | None = None) -> dict[str, str]:
    out = {str(k): v for k, v in (labels or {}).items()}
    if run_id is not None:
        out["run_id"] = run_id
    for k, v in out.items():
        if not isinstance(v, str):
            raise TypeError(f"label {k!r} must be a string, got {type(v).__name__}")
    return out


async def _call(config: Mapping[str, Any] | str, start: Any, *args: Any, take: Any) -> Any:
    p = _provider(config)
    try:
        f = _lib.submit(start, p, *args)
        return await _lib.await_future(f, take)
    finally:
        lib.sbx_provider_free(p)


def _blocking(config: Mapping[str, Any] | str, fn: Any, *args: Any, out: bool) -> Any:
    """One blocking C call (ctypes releases the GIL while it waits)."""
    p = _provider(config)
    try:
        err = c_void_p()
        if out:
            text = c_void_p()
            _lib.check(fn(p, *args, byref(text), byref(err)), err)
            return _lib.take_string(text)
        _lib.check(fn(p, *args, byref(err)), err)
        return None
    finally:
        lib.sbx_provider_free(p)


async def alist_sandboxes(
    config: Mapping[str, Any] | str, *, labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The provider's boxes (all, or those whose metadata has every label):
    dicts with id, status, created, expires_at, labels, image, provider."""
    filt = json.dumps({"labels": _labels(labels)}).encode()
    text = await _call(config, lib.sbx_provider_list_async, filt, take=_lib.TAKE_STRING)
    return json.loads(text)


async def astop_sandbox(config: Mapping[str, Any] | str, sandbox_id: str) -> None:
    """Ends box `sandbox_id` of this provider (no handle needed)."""
    await _call(config, lib.sbx_provider_stop_box_async, _lib.cstr(sandbox_id), take=_lib.TAKE_NONE)


async def acleanup_sandboxes(
    config: Mapping[str, Any] | str,
    *,
    labels: Mapping[str, str] | None = None,
    run_id: str | None = None,
    dry_run: bool = False,
) -> list[str]:
    """Collects expired and dead boxes, and every box with these labels (or
    this run id); returns their ids. `dry_run` only reports."""
    opts = json.dumps({"labels": _labels(labels, run_id), "dry_run": bool(dry_run)}).encode()
    text = await _call(config, lib.sbx_provider_gc_async, opts, take=_lib.TAKE_STRING)
    return json.loads(text)


def list_sandboxes(
    config: Mapping[str, Any] | str, *, labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    filt = json.dumps({"labels": _labels(labels)}).encode()
    return json.loads(_blocking(config, lib.sbx_provider_list, filt, out=True))


def stop_sandbox(config: Mapping[str, Any] | str, sandbox_id: str) -> None:
    _blocking(config, lib.sbx_provider_stop_box, _lib.cstr(sandbox_id), out=False)


def cleanup_sandboxes(
    config: Mapping[str, Any] | str,
    *,
    labels: Mapping[str, str] | None = None,
    run_id: str | None = None,
    dry_run: bool = False,
) -> list[str]:
    opts = json.dumps({"labels": _labels(labels, run_id), "dry_run": bool(dry_run)}).encode()
    return json.loads(_blocking(config, lib.sbx_provider_gc, opts, out=True))


list_sandboxes.__doc__ = alist_sandboxes.__doc__
stop_sandbox.__doc__ = astop_sandbox.__doc__
cleanup_sandboxes.__doc__ = acleanup_sandboxes.__doc__
