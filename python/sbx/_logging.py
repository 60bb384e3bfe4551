"""Loggers that answer to two names: sbx's own and the reference's.

sbx is also NeMo Gym's `nemo_gym.sandbox` API, and code written for the
reference configures the reference's logger names
(`logging.getLogger("nemo_gym.sandbox").setLevel(...)`, a handler on
`nemo_gym.sandbox.providers.registry`, pytest's `caplog.at_level(...,
logger="nemo_gym.sandbox.attribution")`). `twin_logger("sbx.attribution",
"nemo_gym.sandbox.attribution")` logs every record under both names:

- a record is made when either logger is enabled for its level (so raising
  the level of one name does not hide the record from a caller who
  configured the other; `logging.disable()` and `Logger.disabled` apply);
- each handler on either logger's propagation chain receives the record
  once, named after the chain it was reached through (a handler shared by
  both chains, typically the root's, gets one record, not two: the
  reference's name is tried first, so code ported from NeMo Gym that filters
  on `record.name` keeps working);
- the originating logger's filters apply, as `Logger.handle` applies them;
- with no handler anywhere, `logging.lastResort` gets it, as usual.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


def _chain_handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers `Logger.callHandlers` would call, in its order."""
    out: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        out.extend(current.handlers)
        current = current.parent if current.propagate else None  # type: ignore[assignment]
    return out


class TwinLogger(logging.LoggerAdapter):
    """A LoggerAdapter over sbx's logger (`.logger`, `.name`) that also logs
    under the reference's name (`.reference`). Thread-safe as logging is."""

    def __init__(self, name: str, reference_name: str) -> None:
        super().__init__(logging.getLogger(name), {})
        self.reference = logging.getLogger(reference_name)

    def _enabled(self, logger: logging.Logger, level: int) -> bool:
        return not logger.disabled and logger.isEnabledFor(level)

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 (logging's name)
        return self._enabled(self.logger, level) or self._enabled(self.reference, level)

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(level, int):
            raise TypeError("level must be an integer")
        loggers = [lg for lg in (self.reference, self.logger) if self._enabled(lg, level)]
        if not loggers:
            return
        exc_info = kwargs.get("exc_info")
        if exc_info and not isinstance(exc_info, tuple):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__) if isinstance(
                exc_info, BaseException) else sys.exc_info()
        stack_info = kwargs.get("stack_info", False)
        # Frames inside logging are skipped; this frame counts once, then
        # the caller (also through LoggerAdapter.info & co.).
        try:
            fn, lno, func, sinfo = self.logger.findCaller(stack_info, kwargs.get("stacklevel", 1) + 1)
        except ValueError:
            fn, lno, func, sinfo = "(unknown file)", 0, "(unknown function)", None
        seen: set[int] = set()
        passed: logging.LogRecord | None = None
        reached = False
        for lg in loggers:
            record = lg.makeRecord(lg.name, level, fn, lno, msg, args, exc_info, func,
                                   kwargs.get("extra"), sinfo)
            if not lg.filter(record):
                continue
            passed = record
            for handler in _chain_handlers(lg):
                reached = True
                if id(handler) in seen:
                    continue
                seen.add(id(handler))
                if record.levelno >= handler.level:
                    handler.handle(record)
        last = logging.lastResort
        if passed is not None and not reached and last is not None and level >= last.level:
            last.handle(passed)


def twin_logger(name: str, reference_name: str) -> TwinLogger:
    """The logger for sbx module `name` that also logs as `reference_name`."""
    return TwinLogger(name, reference_name)
