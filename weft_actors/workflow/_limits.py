"""Checking ``@activity(rate_limit=..., burst=..., concurrency=...)`` once, at decoration.

A bad limit is a programming error, so it fails the import of the module that declares it
(``TypeError`` for a value of the wrong kind, ``ValueError`` for one out of range), never an
attempt at run time. What the engine keeps is the rate as the seconds between two permits.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .._checks import MAX_SECONDS

__all__ = ["check_limits", "parse_rate"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*/\s*([smh])\s*")


def parse_rate(rate: Any) -> float:
    """``"50/s"``, ``"100/m"``, ``"10/h"``, ``"2.5/s"`` -> the seconds between two permits."""
    if not isinstance(rate, str):
        raise TypeError(f"rate_limit must be a string like '50/s', '100/m' or '10/h', not {rate!r}")
    match = _RATE.fullmatch(rate)
    if match is None:
        raise ValueError(f"rate_limit must look like '50/s', '100/m' or '10/h' (a number per second, minute or hour), not {rate!r}")
    count = float(match.group(1))
    if not (math.isfinite(count) and count > 0):
        raise ValueError(f"rate_limit must allow more than 0 calls, not {rate!r}")
    interval = _UNITS[match.group(2)] / count
    if not 0.0 < interval <= MAX_SECONDS:
        raise ValueError(f"rate_limit {rate!r} is out of range: one call every {interval!r} s")
    return interval


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be at least 1, not {value!r}")
    return value


def check_limits(rate_limit: Any, burst: Any, concurrency: Any) -> tuple[float | None, int, int | None]:
    """``(rate_interval, burst, concurrency)`` for the definition, or the error to raise."""
    interval = None if rate_limit is None else parse_rate(rate_limit)
    if burst is None:
        burst = 1
    else:
        burst = _positive_int(burst, "burst")
        if interval is None:
            raise ValueError("burst needs a rate_limit")
    return interval, burst, None if concurrency is None else _positive_int(concurrency, "concurrency")
