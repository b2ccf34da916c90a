"""The workflow page's record of lifted quarantines (``describe``'s ``quarantine_lifts``):
a quarantine lifted stays visible, when, by whom and why, after the workflow runs again."""

from __future__ import annotations

from typing import Any

from ._html import esc, table

__all__ = ["lifts_html"]


def lifts_html(lifts: list[dict[str, Any]]) -> str:
    """A section with one row per lift, newest first; empty when there was none."""
    if not lifts:
        return ""
    rows = [
        [esc(lift.get("at_iso")), esc(lift.get("by")), esc(lift.get("reason") or ""), esc(lift.get("quarantined_for")), esc(lift.get("lost_count"))]
        for lift in reversed(lifts)
    ]
    return "<h2>Quarantine lifted</h2>" + table(["lifted at", "by", "reason", "it was quarantined for", "owners lost"], rows, table_id="lifts")
