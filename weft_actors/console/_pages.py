"""The console's three pages, rendered on the server from the JSON API's data (``_data``)."""

from __future__ import annotations

import time
from typing import Any

from ._html import as_json, badge, esc, page, query_href, table, workflow_href
from ._lifts import lifts_html
from ._listing import STATUSES
from ._live_parts import LIVE_FIELDS, live_parts
from ._schedule_page import schedule_href
from ._workflow_actions import Kept, actions_html, query_html

__all__ = ["overview_page", "workflows_page", "workflow_page", "schedules_page", "error_page", "login_page"]

_SHARD_COLUMNS = (
    ("slot", "slot"), ("pid", "pid"), ("engine_id", "engine id"), ("alive", "alive"), ("restarts", "restarts"),
    ("live_actors", "live actors"), ("parked_actors", "parked actors"), ("claims_active", "claims"),
    ("commits_per_s", "commits/s"), ("loop_lag_ms", "loop lag (ms)"), ("workflows_in_flight", "in flight"),
    ("loop_stalls_total", "loop stalls"),
    ("storage", "storage"),
)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return badge("yes" if value else "no")
    return esc("" if value is None else value)


def _counts(counts: dict[str, int], base: dict[str, Any]) -> str:
    links = [f'<a href="{query_href("/workflows", {**base, "status": None, "cursor": None})}">all: {sum(counts.values())}</a>']
    for status in STATUSES:
        links.append(f'<a href="{query_href("/workflows", {**base, "status": status, "cursor": None})}">{badge(status)} {counts.get(status, 0)}</a>')
    return f'<p class="counts">{"".join(links)}</p>'


def overview_page(data: dict[str, Any]) -> str:
    supervisor = data["supervisor"]
    ready = badge("yes" if data["ready"] else "no")
    summary = (
        f"<dl><dt>ready</dt><dd id=\"ready\">{ready}</dd>"
        f"<dt>shards ready</dt><dd>{esc(supervisor.get('shards_ready'))} of {esc(supervisor.get('shards'))}</dd>"
        f"<dt>supervisor pid</dt><dd>{esc(supervisor.get('pid'))}</dd>"
        f"<dt>uptime</dt><dd>{esc(supervisor.get('uptime_s'))} s</dd>"
        f"<dt>restarts</dt><dd>{esc(supervisor.get('restarts'))} (hung kills: {esc(supervisor.get('hung_kills'))})</dd>"
        f"<dt>requests</dt><dd>{esc(supervisor.get('frontdoor_requests'))} (errors: {esc(supervisor.get('frontdoor_errors'))})</dd></dl>"
    )
    rows = [[_cell(shard.get(key)) for key, _ in _SHARD_COLUMNS] for shard in data["shards"]]
    shards = table([label for _, label in _SHARD_COLUMNS], rows, table_id="shards")
    body = f"{summary}<h2>Shards</h2>{shards}<h2>Workflows by status</h2>{_counts(data['counts'], {})}{_by_type(data.get('workflows') or [])}"
    return page("Overview", body)


def _by_type(entries: list[dict[str, Any]]) -> str:
    """Workflows per type (rows) and status (the columns some type has), each a link to the list."""
    counts: dict[str, dict[str, int]] = {}
    for entry in entries:
        counts.setdefault(entry["type"], {})[entry["status"]] = entry["count"]
    if not counts:
        return ""
    statuses = [status for status in STATUSES if any(status in by_status for by_status in counts.values())]
    rows = []
    for wf_type, by_status in sorted(counts.items()):
        cells = [f'<a href="{query_href("/workflows", {"type": wf_type})}">{esc(wf_type)}</a>']
        for status in statuses:
            count = by_status.get(status, 0)
            cells.append(f'<a href="{query_href("/workflows", {"type": wf_type, "status": status})}">{count}</a>' if count else "0")
        rows.append(cells)
    return "<h2>Workflows by type</h2>" + table(["type", *statuses], rows, table_id="by-type")


def workflows_page(data: dict[str, Any]) -> str:
    chosen = data["filter"]
    base = {"type": chosen["type"], "prefix": chosen["prefix"], "from": chosen["from"], "to": chosen["to"], "limit": chosen["limit"], "memo": chosen.get("memo") or None}
    options = "".join(
        f'<option value="{esc(s)}"{" selected" if s == chosen["status"] else ""}>{esc(s or "any status")}</option>' for s in ("", *STATUSES)
    )
    form = (
        '<form method="get" action="/workflows" class="inline" id="filter">'
        f'<label>status <select name="status">{options}</select></label> '
        f'<label>type <input name="type" value="{esc(chosen["type"])}" size="14"></label> '
        f'<label>id prefix <input name="prefix" value="{esc(chosen["prefix"])}" size="14"></label> '
        f'<label>memo <input name="memo" value="{esc(chosen.get("memo") or "")}" placeholder="customer=acme" size="18"></label> '
        f'<label>updated from <input name="from" value="{esc(chosen["from"])}" placeholder="2025-01-31T00:00:00Z" size="22"></label> '
        f'<label>to <input name="to" value="{esc(chosen["to"])}" size="22"></label> '
        f'<label>per page <input name="limit" value="{esc(chosen["limit"])}" size="4"></label> '
        "<button>Filter</button></form>"
    )
    rows = [
        [
            f'<a href="{esc(workflow_href(item["id"]))}">{esc(item["id"])}</a>', esc(item["type"]), badge(item["status"]),
            esc(item.get("started_iso")), esc(item.get("ended_iso") or ""), esc(duration_text(item.get("duration"))),
            esc(item["updated_iso"]), f'<code>{esc(item.get("run_id"))}</code>',
        ]
        for item in data["items"]
    ]
    headers = ["id", "type", "status", "started", "ended", "duration", "updated", "run id"]
    listing = table(headers, rows, table_id="workflows") if rows else "<p id=\"empty\">No workflow matches.</p>"
    nav = [f'<a href="{query_href("/workflows", {**base, "status": chosen["status"]})}">first page</a>']
    if data["cursor"]:
        nav.append(f'<a id="next" href="{query_href("/workflows", {**base, "status": chosen["status"], "cursor": data["cursor"]})}">next page</a>')
    body = (
        f"{_counts(data['counts'], base)}{form}<p>Newest updated first; {esc(data['total'])} match the type, id and time filters.</p>"
        f"{listing}<p>{' · '.join(nav)}</p>"
    )
    return page("Workflows", body)


def _spec_text(spec: Any) -> str:
    if not isinstance(spec, dict):
        return ""
    if spec.get("cron"):
        when = f"cron {spec['cron']} ({spec.get('timezone') or 'UTC'})"
    else:
        when = f"every {duration_text(spec.get('every'))}" + (f" + {duration_text(spec['offset'])}" if spec.get("offset") else "")
    return when + (f", jitter {duration_text(spec['jitter'])}" if spec.get("jitter") else "")


def schedules_page(data: dict[str, Any]) -> str:
    rows = []
    for item in data["items"]:
        if "error" in item:
            rows.append([_link(item["id"]), badge(item["status"]), "", "", "", "", esc(item["error"]), "", ""])
            continue
        state = "deleted" if item["deleted"] else "paused" if item["paused"] else "active"
        recent = item["recent"][-1] if item["recent"] else None
        rows.append([
            f'<a href="{esc(schedule_href(item["id"]))}">{esc(item["id"])}</a>',
            badge(state) + (f" {esc(item['note'])}" if item.get("note") else ""),
            esc(item["workflow"]),
            esc(_spec_text(item["spec"])),
            esc(item["overlap"]),
            esc(item["next_iso"][0] if item["next_iso"] else "-"),
            (_link(recent["id"]) + " " + badge(recent["status"])) if recent else "-",
            esc(f"{item['fired']} / {item['missed']} / {item['skipped']}"),
            esc(len(item["running"])),
        ])
    headers = ["schedule", "state", "workflow", "when", "overlap", "next fire", "last run", "fired / missed / skipped", "running"]
    listing = table(headers, rows, table_id="schedules") if rows else '<p id="empty">No schedule yet.</p>'
    more = "<p>Only the first schedules are shown.</p>" if data["more"] else ""
    return page("Schedules", f"<p>Each schedule's page has its fire times, recent runs and actions.</p>{listing}{more}")


def _link(wid: Any) -> str:
    if not isinstance(wid, str):
        return as_json(wid)
    return f'<a href="{esc(workflow_href(wid))}">{esc(wid)}</a>'


def duration_text(seconds: Any) -> str:
    """``seconds`` for a person: ``850 ms``, ``3.25 s``, ``4 min 7 s``, ``2 h 5 min``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {seconds % 60:.0f} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _bars(history: list[dict[str, Any]], now: float | None) -> list[str]:
    """One timeline bar per op: where it started and how long it took, on the span of the
    history's times (a pending op reaches the end, ``now`` for a run still going; an op with
    no known start gets none)."""
    times = [t for op in history for t in (_seconds(op.get("started")), _seconds(op.get("ended"))) if t is not None]
    if not times:
        return [""] * len(history)
    low, high = min(times), max(times)
    if now is not None and any(op.get("outcome") == "pending" for op in history):
        high = max(high, now)
    span = (high - low) or 1.0
    bars = []
    for op in history:
        started, ended = _seconds(op.get("started")), _seconds(op.get("ended"))
        if started is None:
            bars.append("")
            continue
        end = high if ended is None else ended
        left = min((started - low) / span * 100, 99.4)
        width = min(max(0.6, (end - started) / span * 100), 100 - left)
        bars.append(f'<div class="track"><div class="bar {esc(op.get("outcome"))}" style="margin-left:{left:.1f}%;width:{width:.1f}%"></div></div>')
    return bars


_HISTORY_SHOWN = {
    "seq", "kind", "name", "outcome", "attempts", "child_id", "error", "started", "started_iso", "ended", "ended_iso", "duration",
    "payload", "payload_error", "args", "args_error", "result", "result_error", "payload_omitted", "args_omitted", "result_omitted",
}


def _payloads(op: dict[str, Any]) -> str:
    """An op's payloads (a signal's value; an update's arguments and result), as JSON."""
    parts = []
    for field, label in (("payload", ""), ("args", "args "), ("result", "result ")):
        if op.get(f"{field}_omitted"):
            parts.append(f'{esc(label)}<span class="badge">not shown</span> {esc(op[f"{field}_omitted"])} bytes')
        elif op.get(f"{field}_error"):
            parts.append(f'{esc(label)}<span class="badge error">cannot decode</span> {esc(op[f"{field}_error"])}')
        elif field in op:
            parts.append(f'{esc(label)}<code class="payload">{as_json(op[field])}</code>')
    return "<br>".join(parts)


def _history(history: list[dict[str, Any]], now: float | None) -> str:
    if not history:
        return "<p>No ops recorded.</p>"
    rows = []
    for op, bar in zip(history, _bars(history, now)):
        error = op.get("error")
        more = {k: v for k, v in op.items() if k not in _HISTORY_SHOWN}
        rows.append([
            esc(op.get("seq")), esc(op.get("kind")), esc(op.get("name")), badge(op.get("outcome")), esc(op.get("attempts", "")),
            esc(op.get("started_iso") or ""), esc(op.get("ended_iso") or ""), esc(duration_text(op.get("duration"))), bar,
            _link(op["child_id"]) if op.get("child_id") else "",
            "" if not error else f"{esc(error.get('type'))}: {esc(error.get('message'))}",
            _payloads(op),
            as_json(more) if more else "",
        ])
    headers = ["seq", "kind", "name", "outcome", "attempts", "started", "ended", "duration", "timeline", "child", "error", "payload", "more"]
    return table(headers, rows, table_id="history")


def _timers(timers: list[dict[str, Any]]) -> str:
    if not timers:
        return "<p>None pending.</p>"
    rows = [[esc(timer.get("kind")), esc("" if timer.get("seq") is None else timer["seq"]), esc(timer.get("fire_at_iso"))] for timer in timers]
    return table(["kind", "op", "fires at"], rows, table_id="timers")


def _previous_runs(runs: list[Any]) -> str:
    if not runs:
        return "none"
    rows = []
    for run in runs:
        if isinstance(run, dict):
            rows.append([esc(run.get("run_id")), badge(run.get("status")), esc(run.get("ended_iso") or run.get("ended"))])
        else:
            rows.append([esc(run), "", ""])
    return table(["run id", "status", "ended"], rows, table_id="previous-runs")


def _owner(data: dict[str, Any]) -> str:
    if data.get("owner") is None:
        return "none (not running)"
    text = f'engine <code>{esc(data["owner"])}</code>'
    shard = data.get("owner_shard")
    if shard:
        where = f"pid {esc(shard.get('pid'))}" if shard.get("slot") is None else f"shard {esc(shard.get('slot'))}, pid {esc(shard.get('pid'))}"
        if shard.get("state") not in (None, "live"):
            where += f" ({esc(shard['state'])})"
        text += f' — <span id="owner-shard">{where}</span>'
    return text


def _time(data: dict[str, Any], key: str, missing: str) -> str:
    if data.get(key) is None:
        return missing
    return f'<span id="{esc(key)}">{esc(data.get(f"{key}_iso"))}</span> <small>({esc(data.get(key))})</small>'


def _input(data: dict[str, Any]) -> str:
    if data.get("input_error"):
        return f'<span class="badge error">cannot decode</span> {esc(data["input_error"])}'
    return f'<pre id="input">{as_json(data.get("input"))}</pre>'


_SHOWN = {
    "id", "type", "status", "run_id", "input", "input_error", "owner", "owner_shard", "epoch", "created", "updated", "ended",
    "created_iso", "updated_iso", "ended_iso", "history", "timers", "inbox", "result", "error", "nondeterminism", "lost_owners",
    "parent", "previous_runs", "memo", "history_pruned", "queued", "flow", "quarantine_lifts",
}
_SHOWN |= LIVE_FIELDS  # rendered by ``_live_parts``


def _flow(data: dict[str, Any]) -> str:
    """Where a workflow under flow control stands: its group, and its place if it waits."""
    flow = data.get("flow")
    if not flow:
        return "none"
    group = f"key {esc(flow.get('key'))}, " if flow.get("key") is not None else ""
    slots = f"{group}{esc(flow.get('running'))} of {esc(flow.get('concurrency'))} running"
    if flow.get("queued"):
        return f'<span id="queued">queued: position {esc(flow.get("position"))}</span> (priority {esc(flow.get("priority"))}; {slots})'
    return slots


def workflow_page(data: dict[str, Any], notice: str | None = None, now: float | None = None, kept: Kept | None = None) -> str:
    """``notice``: the server's own words (an action done), never text from the query;
    ``now``: the time the timeline of a run still going reaches (default: the clock's);
    ``kept``: a POST's form shown again, with its failure or a query's answer."""
    wid = data["id"]
    if now is None and data.get("ended") is None:
        now = time.time()
    children = [op["child_id"] for op in data.get("history") or () if op.get("child_id")]
    fields = [
        ("type", f'<span id="type">{esc(data.get("type"))}</span>'),
        ("status", f'<span id="status">{badge(data.get("status"))}</span>'),
        ("run id", esc(data.get("run_id"))),
        ("input", _input(data)),
        ("owner", _owner(data)),
        ("epoch", esc(data.get("epoch"))),
        ("created", _time(data, "created", "")),
        ("updated", _time(data, "updated", "")),
        ("ended", _time(data, "ended", "not yet")),
        ("parent", _link(data["parent"]) if data.get("parent") else "none"),
        ("children", ", ".join(_link(c) for c in children) or "none"),
        ("previous runs", _previous_runs(list(data.get("previous_runs") or ()))),
        ("memo", f"<pre>{as_json(data.get('memo'))}</pre>" if data.get("memo") is not None else "none"),
        ("history pruned", esc(data.get("history_pruned")) if data.get("history_pruned") else "no"),
        ("flow control", _flow(data)),
    ]
    for key in sorted(set(data) - _SHOWN):  # a field describe gained since: shown as it is
        fields.append((key.replace("_", " "), f"<pre>{as_json(data[key])}</pre>"))
    body = "".join(f"<dt>{esc(name)}</dt><dd>{value}</dd>" for name, value in fields)
    parts = []
    if notice:
        parts.append(f'<p class="notice" id="notice">{esc(notice)}</p>')
    parts.append(f"<dl>{body}</dl>")
    if data.get("status") == "completed":
        parts.append(f'<h2>Result</h2><pre id="result">{as_json(data.get("result"))}</pre>')
    error = data.get("error")
    if error:
        parts.append(f'<h2>Error</h2><p id="error">{esc(error.get("type"))}: {esc(error.get("message"))}</p>')
        if error.get("traceback"):
            parts.append(f'<pre id="traceback">{esc(error["traceback"])}</pre>')
    if data.get("nondeterminism"):
        parts.append(f'<h2>Nondeterminism</h2><pre id="nondeterminism">{as_json(data["nondeterminism"])}</pre>')
    lost = data.get("lost_owners")
    if lost:
        at = f" (last at {esc(lost.get('at_iso') or lost.get('at'))})" if lost.get("at") is not None else ""
        title = "Quarantined" if data.get("status") == "quarantined" else "Lost owners"
        parts.append(
            f'<h2>{title}</h2><p id="lost">{esc(lost.get("count"))} owners lost in a row{at} while it ran '
            f'{esc(lost.get("reason"))}</p>'
        )
    parts.append(lifts_html(list(data.get("quarantine_lifts") or ())))
    parts.extend(live_parts(data))
    parts.append(f'<h2>History</h2>{_history(data.get("history") or [], now)}')
    parts.append(f'<h2>Pending timers</h2>{_timers(data.get("timers") or [])}')
    inbox = data.get("inbox") or []
    parts.append("<h2>Inbox</h2>" + (table(["seq", "kind", "name"], [[esc(m.get("seq")), esc(m.get("kind")), esc(m.get("name"))] for m in inbox], table_id="inbox") if inbox else "<p>Empty.</p>"))
    parts.append(f'<h2>Actions</h2>{actions_html(wid, data.get("status"), kept)}')
    parts.append(f"<h2>Query</h2>{query_html(wid, kept)}")
    return page(f"Workflow {wid}", "".join(parts))


def error_page(status: int, message: str, back: str | None = None) -> str:
    link = f'<p><a id="back" href="{esc(back)}">back</a></p>' if back else ""
    return page(f"Error {status}", f'<p class="notice error" id="failure">{esc(message)}</p>{link}')


def login_page(next_path: str, failed: bool) -> str:
    """The token form a console off loopback shows to a browser with no credential; the
    token becomes an ``HttpOnly`` cookie, so no script on a page ever sees it."""
    wrong = '<p class="notice error" id="failure">That is not one of this console\'s tokens.</p>' if failed else ""
    form = (
        '<form method="post" action="/login" class="inline" id="login">'
        f'<input type="hidden" name="next" value="{esc(next_path)}">'
        '<input name="credential" type="password" placeholder="console token" required size="34" autofocus> '
        "<button>Log in</button></form>"
    )
    return page("Log in", f"{wrong}<p>This console needs its token (the action token, or the read token for reading only).</p>{form}")
