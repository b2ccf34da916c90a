"""The workflow page's parts about what the workflow is doing now: its pending activities
(each attempt, where it runs, and a retried one's last failure with its traceback) and its
stack trace, behind a button that shows it. Both come from ``describe()``, which the owner
computes from its live actor when the page is asked for."""

from __future__ import annotations

from typing import Any, Final

from .._cli_stack import op_text
from ._html import badge, esc, table

__all__ = ["LIVE_FIELDS", "live_parts"]

LIVE_FIELDS: Final = frozenset({"pending_activities", "stack"})
"""The ``describe()`` fields these parts render (the page shows no raw copy of them)."""


def live_parts(data: dict[str, Any]) -> list[str]:
    """The page's "Pending activities" and "Stack trace" sections (HTML)."""
    return [_pending(data.get("pending_activities") or []), _stack(data)]


def _pending(pending: list[dict[str, Any]]) -> str:
    if not pending:
        return '<h2>Pending activities</h2><p id="pending-activities">None.</p>'
    rows = []
    failures = []
    for entry in pending:
        shard = entry.get("shard") or {}
        failure = entry.get("last_failure")
        where = f"shard {esc(shard.get('slot') if shard.get('slot') is not None else '-')}, pid {esc(shard.get('pid'))}"
        rows.append([
            esc(entry.get("seq")), esc(entry.get("name")), badge(entry.get("state")), esc(entry.get("attempt")),
            esc(entry.get("scheduled_iso") or ""), esc(entry.get("started_iso") or ""), esc(entry.get("next_retry_iso") or ""),
            where, "" if not failure else f'{esc(failure.get("type"))}: {esc(failure.get("message"))}',
        ])
        if failure and failure.get("traceback"):
            failures.append(
                f'<details class="last-failure"><summary>op #{esc(entry.get("seq"))} {esc(entry.get("name"))}: last failure</summary>'
                f'<pre>{esc(failure["traceback"])}</pre></details>'
            )
    headers = ["op", "activity", "state", "attempt", "scheduled", "started", "next retry", "running on", "last failure"]
    return "<h2>Pending activities</h2>" + table(headers, rows, table_id="pending-activities") + "".join(failures)


def _stack(data: dict[str, Any]) -> str:
    stack = data.get("stack")
    if not stack:
        why = "none of its code is running" if data.get("status") != "running" else "the shard that answered cannot replay it (its type is not registered there, or its replay diverges); reload"
        return f'<h2>Stack trace</h2><p id="stack-none">No stack: {esc(why)}.</p>'
    lines = []
    for frame in stack:
        lines.append(f'File "{esc(frame.get("file"))}", line {esc(frame.get("line"))}, in {esc(frame.get("function"))}')
        for op in frame.get("waits_on") or ():
            lines.append(f"    waits on {esc(op_text(op))}")
        if frame.get("waits_on_omitted"):
            lines.append(f"    ... and {esc(frame['waits_on_omitted'])} more ops")
    return (
        '<h2>Stack trace</h2><details id="stack"><summary><span class="button" id="show-stack">Show stack trace</span></summary>'
        f'<pre id="stack-trace">{chr(10).join(lines)}</pre></details>'
    )

