"""The console's actions, each one client call on the supervisor's endpoint, as the CLI's.

``retry`` lifts a quarantine (the CLI's ``retry`` command: ``lift_quarantine``). ``query``
is no action (it changes nothing): ``run_query`` asks one, for whoever may read.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..bus import Client
from ..errors import InvalidRequest
from ._json_input import json_input

__all__ = ["ACTIONS", "run_action", "run_query"]


def _cancel(client: Client, wid: str, form: Mapping[str, str]) -> None:
    client.get_handle(wid).cancel()


def _terminate(client: Client, wid: str, form: Mapping[str, str]) -> None:
    client.get_handle(wid).terminate(form.get("reason") or None)


def _signal(client: Client, wid: str, form: Mapping[str, str]) -> None:
    name = form.get("name", "").strip()
    if not name:
        raise InvalidRequest("a signal needs a name")
    text = form.get("payload", "").strip()
    payload: Any = json_input(text, "the signal's payload", 'true, 42, "text" or {"k": 1}') if text else None
    client.get_handle(wid).signal(name, payload)


def _retry(client: Client, wid: str, form: Mapping[str, str]) -> None:
    client.get_handle(wid).lift_quarantine(form.get("reason", "").strip() or None, by=form.get("by") or "console")


ACTIONS: dict[str, Callable[[Client, str, Mapping[str, str]], None]] = {
    "cancel": _cancel,
    "terminate": _terminate,
    "signal": _signal,
    "retry": _retry,
}


def run_action(client: Client, wid: str, action: str, form: Mapping[str, str], by: str = "console") -> None:
    """Do ``action`` on ``wid`` with the form's fields (``reason``; ``name`` and ``payload``);
    ``by`` names who acts where the record keeps it (a lifted quarantine); raises the
    client's error (``WorkflowNotFound``, ``InvalidRequest``, ...)."""
    handler = ACTIONS.get(action)
    if handler is None:
        raise InvalidRequest(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    handler(client, wid, {**form, "by": by})


def run_query(client: Client, wid: str, form: Mapping[str, str]) -> Any:
    """The answer of query ``name`` with ``args``, a JSON array of its arguments (empty or
    absent: none); raises the client's error (``UnknownQuery``, ``InvalidRequest``, ...)."""
    name = form.get("name", "").strip()
    if not name:
        raise InvalidRequest("a query needs a name")
    text = form.get("args", "").strip()
    args: Any = json_input(text, "the query's arguments", '[] or [1, "a"]', "a JSON array") if text else []
    if not isinstance(args, list):
        raise InvalidRequest("the query's arguments must be a JSON array (e.g. [] or [1, \"a\"])")
    return client.get_handle(wid).query(name, *args)
