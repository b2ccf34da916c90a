"""What a direct client reads in a shard's directory entry and in its error answers: where a
shard is reached from here, a wait moved to another owner (``_moves``), a shard going away.
"""

from __future__ import annotations

from typing import Any

from ._dispatch import STOPPING
from ._moves import MOVED

__all__ = ["moved_to", "reachable", "stopping"]


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
