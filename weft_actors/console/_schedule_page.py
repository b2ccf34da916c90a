"""A schedule's page: what it fires and when (spec, timezone, overlap policy, the next fire
times), what it fired (recent runs with their status, the counts) and its actions (pause and
unpause with a note, trigger, backfill between two ISO 8601 times, delete), each needing the
action token like the workflow page's.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._html import as_json, badge, esc, page, table, workflow_href
from ._schedule_actions import SCHEDULE_ACTIONS

__all__ = ["schedule_page", "schedule_href", "schedule_state"]


def schedule_href(sid: str) -> str:
    return "/schedules" + workflow_href(sid)[len("/workflows"):]


def schedule_state(item: Mapping[str, Any]) -> str:
    return "deleted" if item.get("deleted") else "paused" if item.get("paused") else "active"


def _spec_rows(spec: Any) -> list[tuple[str, str]]:
    if not isinstance(spec, dict):
        return [("spec", f"<pre>{as_json(spec)}</pre>")]
    rows = [("spec", f'<code id="spec">{as_json(spec)}</code>')]
    rows.append(("timezone", f'<span id="timezone">{esc(spec.get("timezone") or "UTC")}</span>'))
    return rows


def _runs(recent: list[dict[str, Any]]) -> str:
    if not recent:
        return '<p id="no-runs">None yet.</p>'
    rows = [
        [f'<a href="{esc(workflow_href(run["id"]))}">{esc(run["id"])}</a>', esc(run.get("nominal_iso")), badge(run.get("status"))]
        for run in reversed(recent)
    ]
    return table(["run", "fire time", "status"], rows, table_id="recent-runs")


def _kept_value(kept: Mapping[str, Any] | None, action: str, field: str) -> str:
    if not kept or kept.get("action") != action:
        return ""
    return f' value="{esc(kept["form"].get(field, ""))}"'


def _actions(sid: str, item: Mapping[str, Any], kept: Mapping[str, Any] | None) -> str:
    href = esc(schedule_href(sid))
    token = '<input name="token" type="password" placeholder="action token" required size="18">'
    note = '<input name="note" placeholder="note (optional)" size="18"{}>'
    forms = {
        "pause": f'<form method="post" class="inline" id="pause" action="{href}/pause">{token} {note.format(_kept_value(kept, "pause", "note"))} <button>Pause</button></form>',
        "unpause": f'<form method="post" class="inline" id="unpause" action="{href}/unpause">{token} {note.format(_kept_value(kept, "unpause", "note"))} <button>Unpause</button></form>',
        "trigger": f'<form method="post" class="inline" id="trigger" action="{href}/trigger">{token} <button>Trigger now</button></form>',
        "backfill": (
            f'<form method="post" class="inline" id="backfill" action="{href}/backfill">{token} '
            f'<input name="start" placeholder="start, 2025-01-31T00:00:00Z" required size="24"{_kept_value(kept, "backfill", "start")}> '
            f'<input name="end" placeholder="end (ISO 8601)" required size="24"{_kept_value(kept, "backfill", "end")}> <button>Backfill</button></form>'
        ),
        "delete": f'<form method="post" class="inline" id="delete" action="{href}/delete">{token} <button>Delete</button></form>',
    }
    if item.get("deleted"):
        return '<p id="no-actions">None: the schedule is deleted.</p>'
    shown = [action for action in SCHEDULE_ACTIONS if action != ("unpause" if not item.get("paused") else "pause")]
    return "".join(forms[action] for action in shown)


def schedule_page(item: dict[str, Any], notice: str | None = None, kept: Mapping[str, Any] | None = None) -> str:
    """``notice``: the server's own words (an action done); ``kept``: a refused POST's form as
    typed (never the token) and its ``failure``."""
    sid = item["id"]
    state = schedule_state(item)
    fields = [
        ("state", f'<span id="state">{badge(state)}</span>' + (f' <span id="note">{esc(item["note"])}</span>' if item.get("note") else "")),
        ("workflow", f'<span id="workflow">{esc(item.get("workflow"))}</span>'),
        *_spec_rows(item.get("spec")),
        ("overlap policy", f'<span id="overlap">{esc(item.get("overlap"))}</span>'),
        ("catch-up window", esc(item.get("catchup_window"))),
        ("next fire times", "<br>".join(f'<span class="next">{esc(t)}</span>' for t in item.get("next_iso") or ()) or "none"),
        ("last fire", esc(item.get("last_fire_iso") or "none")),
        ("counts", f'<span id="counts">fired {esc(item.get("fired"))}, missed {esc(item.get("missed"))}, skipped {esc(item.get("skipped"))}, '
                   f'running {esc(len(item.get("running") or ()))}, buffered {esc(item.get("buffered"))}</span>'),
        ("its workflow", f'<a href="{esc(workflow_href(sid))}">{esc(sid)}</a> {badge(item.get("status"))}'),
    ]
    parts = []
    if notice:
        parts.append(f'<p class="notice" id="notice">{esc(notice)}</p>')
    if kept and kept.get("failure"):
        parts.append(f'<p class="notice error" id="failure">{esc(kept["failure"])}</p>')
    parts.append("<dl>" + "".join(f"<dt>{esc(name)}</dt><dd>{value}</dd>" for name, value in fields) + "</dl>")
    parts.append(f'<h2>Recent runs</h2>{_runs(list(item.get("recent") or ()))}')
    parts.append("<h2>Actions</h2><p>Actions need the token the supervisor printed at start (typed once per tab).</p>")
    parts.append(_actions(sid, item, kept))
    return page(f"Schedule {sid}", "".join(parts))
