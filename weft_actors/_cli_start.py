"""What ``start`` prints: the id and run, and, for a start that waits in a flow-control queue
(a type with ``concurrency``), that it is pending and where in the queue, so nobody waits
for a workflow that has not begun."""

from __future__ import annotations

import logging
from typing import Any

from .errors import WeftError

__all__ = ["started"]

log = logging.getLogger("weft_actors.cli")


def started(handle: Any) -> tuple[dict[str, Any], str]:
    """``(json value, readable text)`` for a start just made through ``handle``. Reads the
    workflow's flow-control state (one ``describe``); if that fails, the start still stands
    and is printed without it."""
    value: dict[str, Any] = {"id": handle.id, "run_id": handle.run_id}
    text = f"{handle.id} (run {handle.run_id})"
    try:
        flow = handle.describe().get("flow")
    except WeftError as exc:
        log.debug("no queue position for %s: %s", handle.id, exc)
        return value, text
    if isinstance(flow, dict) and flow.get("queued"):
        value.update(status="pending", position=flow.get("position"))
        text += f": pending, position {flow.get('position')} in the queue of its type (concurrency {flow.get('concurrency')})"
    return value, text
