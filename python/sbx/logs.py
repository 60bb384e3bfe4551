"""[svc-logs] A box's service log (its entrypoint's stdout and stderr), read
through the C library's sbx_sandbox_logs: the rules (where the log is, which
files are trusted, since, tail, follow, rotation) are src/core/logs.c's; this
module only converts arguments and entries."""

from __future__ import annotations

import ctypes
import datetime
from ctypes import POINTER, byref, c_double, c_int, c_longlong, c_size_t, c_uint, c_void_p
from typing import Any, Callable, NamedTuple

from . import _lib
from ._lib import lib

STDOUT, STDERR, EVENT = 1, 2, 3
FOLLOW = 1
_STREAMS = {STDOUT: "stdout", STDERR: "stderr", EVENT: "event"}

_CB = ctypes.CFUNCTYPE(c_int, c_double, c_int, ctypes.POINTER(ctypes.c_char), c_size_t, c_void_p)
lib.sbx_sandbox_logs.restype = c_int
lib.sbx_sandbox_logs.argtypes = [c_void_p, c_double, c_longlong, c_uint, _CB, c_void_p, POINTER(c_void_p)]


class LogEntry(NamedTuple):
    """One entry: `time` (unix seconds, when the provider read it), `stream`
    ("stdout", "stderr", or "event": the service ended, `data` b"exited 3" or
    b"killed 9"; or the box's agent died, b"agent killed 9"), `data`: one
    line with its newline, or a piece of a line. Events are records the
    provider writes apart from the box's output; "stdout"/"stderr" entries
    are the box's bytes, exact, whatever they say (a b"sbx-agent: ..." line
    included: the agent writes it inside the box, where the service could
    too)."""

    time: float
    stream: str
    data: bytes


def _since(since: Any) -> float:
    if since is None:
        return 0.0
    if isinstance(since, datetime.datetime):
        return since.timestamp()
    if isinstance(since, bool) or not isinstance(since, (int, float)):
        raise TypeError("since must be None, unix seconds or a datetime")
    return float(since)


def _tail(tail: Any) -> int:
    if tail is None:
        return -1
    if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
        raise ValueError("tail must be None (all) or a number of lines >= 0")
    return tail


def read(
    ptr: c_void_p,
    *,
    since: Any = None,
    tail: int | None = None,
    follow: bool = False,
    on_entry: Callable[[LogEntry], Any] | None = None,
) -> list[LogEntry] | None:
    """Blocks in the calling thread. Without `on_entry`, returns the entries;
    with it, calls it per entry (a true return stops) and returns None."""
    out: list[LogEntry] = []
    raised: list[BaseException] = []

    def cb(t: float, stream: int, data: Any, n: int, _user: Any) -> int:
        try:
            e = LogEntry(t, _STREAMS.get(stream, str(stream)), ctypes.string_at(data, n))
            if on_entry is None:
                out.append(e)
                return 0
            return 1 if on_entry(e) else 0
        except BaseException as exc:  # noqa: BLE001 (re-raised below, after the C call returns)
            raised.append(exc)
            return 1

    ccb = _CB(cb)
    err = c_void_p()
    rc = lib.sbx_sandbox_logs(ptr, _since(since), _tail(tail), FOLLOW if follow else 0, ccb, None, byref(err))
    if raised:
        if err:
            lib.sbx_error_free(err)
        raise raised[0]
    _lib.check(rc, err)
    return None if on_entry is not None else out
