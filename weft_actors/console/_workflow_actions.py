"""The workflow page's action forms: only those that apply to the workflow's status, a
terminate that asks for confirmation, a query form, and a refused form shown again as typed.

Which apply: a finished workflow (``TERMINAL``) takes no cancel, terminate or signal; only a
quarantined one takes "lift quarantine". Terminate needs its ``confirm`` box ticked: the
browser will not send the form without it (``required``, no script needed) and the server
refuses a form post without it (``confirm_missing``), so a stray click never ends a run. A
query is a read (it changes nothing), so it takes no action token: whoever may read the page
may ask it. The token itself is never written back into a page: the tab's script fills it in.
"""

from __future__ import annotations

import json
from typing import Any, Final, Mapping

from ..store import QUARANTINED, TERMINAL
from ._html import esc, workflow_href

__all__ = ["applicable", "actions_html", "query_html", "Kept", "ANSWER_SHOWN"]

ANSWER_SHOWN: Final = 64 * 1024
"""Characters of a query's answer (as indented JSON) the workflow page shows."""

Kept = Mapping[str, Any]
"""What the page shows again after a POST: ``action``, the ``form`` as typed, and either the
``failure`` (the server's words) or, for a query, its ``answer``."""


def applicable(status: Any) -> tuple[str, ...]:
    """The actions that apply to a workflow in ``status``."""
    if status in TERMINAL:
        return ()
    found = ("cancel", "terminate", "signal")
    return (*found, "retry") if status == QUARANTINED else found


def _value(kept: Kept | None, action: str, field: str) -> str:
    if not kept or kept.get("action") != action:
        return ""
    return f' value="{esc(kept["form"].get(field, ""))}"'


def _failure(kept: Kept | None, action: str) -> str:
    if not kept or kept.get("action") != action or not kept.get("failure"):
        return ""
    return f'<p class="notice error" id="{esc(action)}-failure">{esc(kept["failure"])}</p>'


def actions_html(wid: str, status: Any, kept: Kept | None = None) -> str:
    """The forms of the actions that apply (``applicable``), a refused one as it was typed."""
    href = esc(workflow_href(wid))
    token = '<input name="token" type="password" placeholder="action token" required size="18">'
    forms = {
        "cancel": f'<form method="post" class="inline" id="cancel" action="{href}/cancel">{token} <button>Cancel</button></form>',
        "terminate": (
            f'<form method="post" class="inline" id="terminate" action="{href}/terminate">{token} '
            f'<input name="reason" placeholder="reason" size="18"{_value(kept, "terminate", "reason")}> '
            '<label><input type="checkbox" name="confirm" value="yes" required> confirm: end it now, no cleanup</label> '
            "<button>Terminate</button></form>"
        ),
        "signal": (
            f'<form method="post" class="inline" id="signal" action="{href}/signal">{token} '
            f'<input name="name" placeholder="signal name" required size="12"{_value(kept, "signal", "name")}> '
            f'<input name="payload" placeholder="JSON payload, e.g. true" size="18"{_value(kept, "signal", "payload")}> <button>Signal</button></form>'
        ),
        "retry": (
            f'<form method="post" class="inline" id="retry" action="{href}/retry">{token} '
            f'<input name="reason" placeholder="why (kept in its record)" size="22"{_value(kept, "retry", "reason")}> '
            "<button>Lift quarantine</button></form>"
        ),
    }
    shown = applicable(status)
    failures = "".join(_failure(kept, action) for action in forms)
    if not shown:
        return f'{failures}<p id="no-actions">None: the workflow has finished ({esc(status)}).</p>'
    intro = "<p>Actions need the token the supervisor printed at start (typed once per tab).</p>"
    return failures + intro + "".join(forms[action] for action in shown)


def query_html(wid: str, kept: Kept | None = None) -> str:
    """The query form (a read: no token) and, after one, its answer or its error."""
    href = esc(workflow_href(wid))
    form = (
        f'<form method="post" class="inline" id="query" action="{href}/query">'
        f'<input name="name" placeholder="query name" required size="14"{_value(kept, "query", "name")}> '
        f'<input name="args" placeholder="JSON array of arguments, e.g. [1, &quot;a&quot;]" size="30"{_value(kept, "query", "args")}> '
        "<button>Query</button></form>"
    )
    if kept and kept.get("action") == "query":
        if kept.get("failure"):
            return form + _failure(kept, "query")
        name = esc(kept["form"].get("name", ""))
        return form + f"<p>Answer to <code>{name}</code>:</p>{_answer_html(kept.get('answer'))}"
    return form


def _answer_html(answer: Any) -> str:
    """A query's answer as indented JSON, cut at ``ANSWER_SHOWN`` characters: an answer may be
    as large as the payload limit, which no one reads on a page (the API has it whole)."""
    text = json.dumps(answer, indent=2, ensure_ascii=False, default=repr)
    if len(text) <= ANSWER_SHOWN:
        return f'<pre id="query-answer">{esc(text)}</pre>'
    return (
        f'<pre id="query-answer">{esc(text[:ANSWER_SHOWN])}\n...</pre><p id="query-answer-cut">The first {ANSWER_SHOWN:,} of '
        f"{len(text):,} characters; <code>POST /api/workflows/ID/query</code> or the CLI's <code>query</code> returns it whole.</p>"
    )
