"""The console's three pages, rendered on the server from the JSON API's data (``_data``)."""

from __future__ import annotations

from typing import Any

from ._data import iso
from ._html import as_json, badge, esc, page, query_href, table, workflow_href
from ._listing import STATUSES

__all__ = ["overview_page", "workflows_page", "workflow_page", "error_page"]

_SHARD_COLUMNS = (
    ("slot", "slot"), ("pid", "pid"), ("engine_id", "engine id"), ("alive", "alive"), ("restarts", "restarts"),
    ("live_actors", "live actors"), ("parked_actors", "parked actors"), ("claims_active", "claims"),
    ("commits_per_s", "commits/s"), ("workflows_in_flight", "in flight"), ("loop_stalls_total", "loop stalls"),
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
    shards = table([label for _, label in _SHARD_COLUMNS], rows)
    return page("Overview", f"{summary}<h2>Shards</h2>{shards}<h2>Workflows by status</h2>{_counts(data['counts'], {})}")


def workflows_page(data: dict[str, Any]) -> str:
    chosen = data["filter"]
    base = {"type": chosen["type"], "prefix": chosen["prefix"], "from": chosen["from"], "to": chosen["to"], "limit": chosen["limit"]}
    options = "".join(
        f'<option value="{esc(s)}"{" selected" if s == chosen["status"] else ""}>{esc(s or "any status")}</option>' for s in ("", *STATUSES)
    )
    form = (
        '<form method="get" action="/workflows" class="inline" id="filter">'
        f'<label>status <select name="status">{options}</select></label> '
        f'<label>type <input name="type" value="{esc(chosen["type"])}" size="14"></label> '
        f'<label>id prefix <input name="prefix" value="{esc(chosen["prefix"])}" size="14"></label> '
        f'<label>updated from <input name="from" value="{esc(chosen["from"])}" placeholder="2025-01-31T00:00:00Z" size="22"></label> '
        f'<label>to <input name="to" value="{esc(chosen["to"])}" size="22"></label> '
        f'<label>per page <input name="limit" value="{esc(chosen["limit"])}" size="4"></label> '
        "<button>Filter</button></form>"
    )
    rows = [
        [f'<a href="{esc(workflow_href(item["id"]))}">{esc(item["id"])}</a>', esc(item["type"]), badge(item["status"]), esc(item["updated_iso"])]
        for item in data["items"]
    ]
    listing = table(["id", "type", "status", "updated"], rows) if rows else "<p id=\"empty\">No workflow matches.</p>"
    nav = [f'<a href="{query_href("/workflows", {**base, "status": chosen["status"]})}">first page</a>']
    if data["cursor"]:
        nav.append(f'<a id="next" href="{query_href("/workflows", {**base, "status": chosen["status"], "cursor": data["cursor"]})}">next page</a>')
    body = (
        f"{_counts(data['counts'], base)}{form}<p>Newest updated first; {esc(data['total'])} match the type, id and time filters.</p>"
        f"{listing}<p>{' · '.join(nav)}</p>"
    )
    return page("Workflows", body)


def _link(wid: Any) -> str:
    if not isinstance(wid, str):
        return as_json(wid)
    return f'<a href="{esc(workflow_href(wid))}">{esc(wid)}</a>'


def _history(history: list[dict[str, Any]]) -> str:
    if not history:
        return "<p>No ops recorded.</p>"
    rows = []
    for op in history:
        error = op.get("error")
        rows.append([
            esc(op.get("seq")), esc(op.get("kind")), esc(op.get("name")), badge(op.get("outcome")), esc(op.get("attempts", "")),
            _link(op["child_id"]) if op.get("child_id") else "",
            "" if not error else f"{esc(error.get('type'))}: {esc(error.get('message'))}",
            as_json({k: v for k, v in op.items() if k not in ("seq", "kind", "name", "outcome", "attempts", "child_id", "error")}) if set(op) - {"seq", "kind", "name", "outcome", "attempts", "child_id", "error"} else "",
        ])
    return table(["seq", "kind", "name", "outcome", "attempts", "child", "error", "more"], rows)


def _actions(wid: str) -> str:
    href = esc(workflow_href(wid))
    token = '<input name="token" type="password" placeholder="action token" required size="18">'
    return (
        f'<form method="post" class="inline" id="cancel" action="{href}/cancel">{token} <button>Cancel</button></form>'
        f'<form method="post" class="inline" id="terminate" action="{href}/terminate">{token} '
        '<input name="reason" placeholder="reason" size="18"> <button>Terminate</button></form>'
        f'<form method="post" class="inline" id="signal" action="{href}/signal">{token} '
        '<input name="name" placeholder="signal name" required size="12"> '
        '<input name="payload" placeholder="JSON payload, e.g. true" size="18"> <button>Signal</button></form>'
        f'<form method="post" class="inline" id="retry" action="{href}/retry">{token} <button>Lift quarantine</button></form>'
    )


_SHOWN = {
    "id", "type", "status", "run_id", "owner", "owner_shard", "epoch", "created", "updated", "created_iso", "updated_iso",
    "history", "inbox", "result", "error", "nondeterminism", "lost_owners", "parent", "previous_runs", "memo", "history_pruned",
}


def workflow_page(data: dict[str, Any], notice: str | None = None, failure: str | None = None) -> str:
    wid = data["id"]
    shard = data.get("owner_shard")
    owner = "none (not running)" if data.get("owner") is None else esc(data["owner"])
    if shard:
        owner += f" — shard {esc(shard['slot'])}, pid {esc(shard['pid'])}"
    fields = [
        ("type", esc(data.get("type"))),
        ("status", f'<span id="status">{badge(data.get("status"))}</span>'),
        ("run id", esc(data.get("run_id"))),
        ("owner engine", owner),
        ("epoch", esc(data.get("epoch"))),
        ("created", f'{esc(data.get("created_iso"))} <small>({esc(data.get("created"))})</small>'),
        ("updated", f'{esc(data.get("updated_iso"))} <small>({esc(data.get("updated"))})</small>'),
        ("parent", _link(data["parent"]) if data.get("parent") else "none"),
        ("previous runs", esc(", ".join(map(str, data.get("previous_runs") or ()))) or "none"),
        ("memo", f"<pre>{as_json(data.get('memo'))}</pre>" if data.get("memo") is not None else "none"),
        ("history pruned", esc(data.get("history_pruned")) if data.get("history_pruned") else "no"),
    ]
    children = [op["child_id"] for op in data.get("history") or () if op.get("child_id")]
    fields.append(("children", ", ".join(_link(c) for c in children) or "none"))
    for key in sorted(set(data) - _SHOWN):  # a field describe gained since: shown as it is
        fields.append((key.replace("_", " "), f"<pre>{as_json(data[key])}</pre>"))
    body = "".join(f"<dt>{esc(name)}</dt><dd>{value}</dd>" for name, value in fields)
    parts = []
    if notice:
        parts.append(f'<p class="notice" id="notice">{esc(notice)}</p>')
    if failure:
        parts.append(f'<p class="notice error" id="failure">{esc(failure)}</p>')
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
        at = f" (last at {esc(iso(lost['at']) if isinstance(lost.get('at'), (int, float)) else lost.get('at'))})" if lost.get("at") is not None else ""
        parts.append(
            f'<h2>Lost owners / quarantine</h2><p id="lost">{esc(lost.get("count"))} owners lost in a row{at}: '
            f'{esc(lost.get("reason"))}</p>'
        )
    parts.append(f'<h2>History</h2>{_history(data.get("history") or [])}')
    inbox = data.get("inbox") or []
    parts.append("<h2>Inbox</h2>" + (table(["seq", "kind", "name"], [[esc(m.get("seq")), esc(m.get("kind")), esc(m.get("name"))] for m in inbox]) if inbox else "<p>Empty.</p>"))
    parts.append(f"<h2>Actions</h2><p>Actions need the token the supervisor printed at start (typed once per tab).</p>{_actions(wid)}")
    return page(f"Workflow {wid}", "".join(parts))


def error_page(status: int, message: str) -> str:
    return page(f"Error {status}", f'<p class="notice error" id="failure">{esc(message)}</p>')
