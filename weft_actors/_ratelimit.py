"""A log line per interval for an error that can repeat thousands of times a second.

A full or read-only disk fails every commit, every heartbeat and every maintenance pass: one
line each wrote hundreds of megabytes of log. ``RateLimitedLog`` writes the first line of a
kind, then at most one per ``interval`` seconds, saying how many were suppressed since.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """Per key (the kind of message): when it last logged and how many it held back since."""

    __slots__ = ("_logger", "_interval", "_clock", "_last", "_suppressed")

    def __init__(self, logger: logging.Logger, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def log(self, level: int, key: str, message: str, *args: Any, **kwargs: Any) -> bool:
        """Log ``message % args`` at ``level`` unless a ``key`` line was logged less than an
        interval ago (then count it). True if it was written."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._suppressed.pop(key, 0)
        if held:
            message += " (%d similar lines suppressed in the last %.0f s)"
            args = (*args, held, now - last if last is not None else 0.0)
        self._logger.log(level, message, *args, **kwargs)
        return True

    def warning(self, key: str, message: str, *args: Any, **kwargs: Any) -> bool:
        return self.log(logging.WARNING, key, message, *args, **kwargs)

    def error(self, key: str, message: str, *args: Any, **kwargs: Any) -> bool:
        return self.log(logging.ERROR, key, message, *args, **kwargs)

    def suppressed(self, key: str) -> int:
        return self._suppressed.get(key, 0)
