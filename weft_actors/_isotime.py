"""ISO 8601 text for the epoch-second times records keep.

Records, ``describe`` and ``list`` keep times as epoch seconds (floats): exact, cheap to
store and to compare. People read ISO 8601, so every answer that carries a time ``T`` carries
``T_iso`` beside it too (``with_iso``), one scheme for every time: UTC, milliseconds, ``Z``.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

__all__ = ["iso_utc", "with_iso"]


def iso_utc(epoch: Any) -> str | None:
    """``epoch`` seconds as ``2026-12-01T15:20:00.123Z``; ``None`` for anything that is not a
    finite time (``None``, an infinite deadline, a value out of the calendar's range)."""
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or not math.isfinite(epoch):
        return None
    try:
        moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def with_iso(entry: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A copy of ``entry`` with ``KEY_iso`` right after each ``KEY`` of ``keys`` it has."""
    timed: dict[str, Any] = {}
    for key, value in entry.items():
        timed[key] = value
        if key in keys:
            timed[f"{key}_iso"] = iso_utc(value)
    return timed
