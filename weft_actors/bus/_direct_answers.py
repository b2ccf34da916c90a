"""What a direct client reads in a shard's directory entry and in its error answers: where a
shard is reached from here, a wait moved to another owner (``_moves``), a shard going away,
a request a draining shard did not take.
"""

from __future__ import annotations

from typing import Any

from ..errors import ServerUnavailable
from ._dispatch import STOPPING
from ._moves import MOVED

__all__ = ["moved_to", "reachable", "stopping", "turned_away"]


def reachable(endpoint: str, front_door: str) -> str:
    """A shard's endpoint as this client reaches it: a shard bound to every interface
    (``0.0.0.0``, ``*``, ``::``) is reached at the host the front door was reached at."""
    rest = endpoint[len("tcp://") :]
    host, _, port = rest.rpartition(":")
    if host.strip("[]") not in ("0.0.0.0", "*", "::"):
        return endpoint
    front_host = front_door[len("tcp://") :].rpartition(":")[0]
    return f"tcp://{front_host}:{port}"


def moved_to(reply: dict[str, Any]) -> tuple[str, float, Any] | None:
    """(workflow id, wait left, run id) of a ``workflow_moved`` answer (``_moves``), else None."""
    error = reply["error"]
    if not isinstance(error, dict) or error.get("code") != MOVED:
        return None
    context: Any = error.get("context")
    try:
        wid, wait = context["wid"], float(context["wait"])
    except (TypeError, KeyError, ValueError):
        return None
    return (wid, wait, context.get("run_id")) if type(wid) is str else None


def stopping(reply: dict[str, Any]) -> bool:
    """Whether an error answer says its shard is going away (stopped, or deposed)."""
    error = reply["error"]
    return isinstance(error, dict) and error.get("code") in STOPPING


def turned_away(reply: dict[str, Any]) -> bool:
    """Whether an error answer is a draining shard's refusal of a request it did not take
    (``server_unavailable``; a shard answers it for nothing else): nothing was applied, so
    the front door may take any request so answered, a write too."""
    error = reply["error"]
    return isinstance(error, dict) and error.get("code") == ServerUnavailable.code
