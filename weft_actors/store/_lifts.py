"""The record a lifted quarantine leaves on its workflow: a quarantine an operator lifted is
part of the workflow's story (why it stopped, who let it run again, and why), so it stays in
the workflow's record (``lifted``, the newest ``LIFTS_KEPT``) for ``describe`` and the
console, on every store (the record is the same on LMDB and PostgreSQL).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["note_lift", "LIFTS_KEPT", "MAX_NOTE"]

LIFTS_KEPT: Final = 10
"""Lifts a record keeps (the newest): a workflow lifted again and again stays bounded."""
MAX_NOTE: Final = 500
"""Characters of ``by`` and ``reason`` kept: a note, not a payload."""


def note_lift(record: dict[str, Any], lost: dict[str, Any], now: float, by: str | None, reason: str | None) -> None:
    """Append the lift of ``record``'s quarantine (it had ``lost``, as counted) to its
    ``lifted`` list, dropping the oldest past ``LIFTS_KEPT``."""
    entry = {
        "at": now,
        "by": (by or "unknown")[:MAX_NOTE],
        "reason": None if reason is None else reason[:MAX_NOTE],
        "lost_count": lost.get("count"),
        "quarantined_for": lost.get("reason"),
        "run_id": record.get("run_id"),
    }
    record["lifted"] = [*(record.get("lifted") or ()), entry][-LIFTS_KEPT:]
