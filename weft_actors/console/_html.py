"""HTML building blocks: escaping, the page frame (inline CSS and a few lines of JS), tables.

Every string that reaches a page goes through ``esc`` (or ``attr``) unless it is markup built
here: workflow ids, types, names, payloads, errors and tracebacks all come from users.
"""

from __future__ import annotations

import html
import json
from typing import Any, Iterable
from urllib.parse import quote, urlencode

__all__ = ["esc", "page", "table", "workflow_href", "query_href", "as_json", "badge"]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2329;background:#f6f7f9}
header{background:#1d2b3a;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:center}
header a{color:#cfe3ff;text-decoration:none;font-weight:600}header b{font-size:16px}
main{padding:16px 20px;max-width:1400px}
table{border-collapse:collapse;background:#fff;margin:8px 0 18px;min-width:50%}
th,td{border:1px solid #d8dde3;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
pre{background:#fff;border:1px solid #d8dde3;padding:8px;overflow:auto;max-height:420px;margin:0}
.badge{display:inline-block;padding:1px 8px;border-radius:9px;font-size:12px;font-weight:600;background:#e3e7eb}
.completed,.ok,.yes{background:#d5f2dc;color:#135c26}.failed,.error,.no,.timed_out{background:#fbdada;color:#8a1212}
.running,.pending{background:#dbe9fb;color:#123f7a}.quarantined{background:#fde7c4;color:#7a4a00}
.cancelled,.terminated,.continued{background:#e6e0f5;color:#3c2a70}
.notice{padding:8px 12px;border-radius:4px;margin:8px 0;background:#d5f2dc}.notice.error{background:#fbdada}
form.inline{display:inline-block;margin:0 12px 8px 0;padding:8px;background:#fff;border:1px solid #d8dde3}
dl{display:grid;grid-template-columns:max-content auto;gap:4px 16px;background:#fff;padding:10px;border:1px solid #d8dde3}
dt{font-weight:600}dd{margin:0}
.counts a{margin-right:12px}
.track{width:180px;height:10px;background:#eef1f4;border-radius:3px;overflow:hidden}
.bar{height:10px;border-radius:3px;background:#4f86d9}.bar.error{background:#d9534f}.bar.pending{background:#e8a33d}
code{font-size:12px}
"""

# Fills every token field from this tab's storage and remembers what is typed there: the
# token is typed once per tab, never written into a page by the server.
_JS = """
document.addEventListener('DOMContentLoaded',function(){
 var t=sessionStorage.getItem('weft-token')||'';
 document.querySelectorAll('input[name=token]').forEach(function(i){if(!i.value)i.value=t;});
 document.querySelectorAll('form[method=post]').forEach(function(f){f.addEventListener('submit',function(){
  var i=f.querySelector('input[name=token]');if(i&&i.value)sessionStorage.setItem('weft-token',i.value);});});
});
"""


def esc(value: Any) -> str:
    """``value`` as text safe in an element or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def as_json(value: Any) -> str:
    """``value`` as indented JSON (``repr`` for what JSON cannot carry), escaped."""
    return esc(json.dumps(value, indent=2, ensure_ascii=False, default=repr))


def badge(text: Any) -> str:
    return f'<span class="badge {esc(text)}">{esc(text)}</span>'


def workflow_href(wid: str) -> str:
    return "/workflows/" + quote(wid, safe="")


def query_href(path: str, params: dict[str, Any]) -> str:
    """``path?params`` without the empty ones, escaped for an attribute."""
    kept = {key: value for key, value in params.items() if value not in (None, "")}
    return esc(path + ("?" + urlencode(kept) if kept else ""))


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], table_id: str | None = None) -> str:
    """A table of cells that are markup already (escape them before)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    ident = "" if table_id is None else f' id="{esc(table_id)}"'
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, body: str) -> str:
    """A whole document: header with the navigation, then ``body`` (markup)."""
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)} · weft_actors</title><style>{_CSS}</style><script>{_JS}</script></head>"
        "<body><header><b>weft_actors</b><a href=\"/\">Overview</a><a href=\"/workflows\">Workflows</a><a href=\"/schedules\">Schedules</a></header>"
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )
