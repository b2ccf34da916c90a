"""The front door's side of ``WorkflowMoved``: a wait resent as a ``result`` to the new owner.

A shard that hands its workflows off answers each ``result`` or ``execute`` still waiting on
it ``WorkflowMoved`` (its context: ``wid``, the ``wait`` left, an ``execute``'s ``run_id``).
The front door turns it into a ``result`` request under the client's own request id, routed
as any request for that workflow (the draining shard excluded), so the client's call keeps
waiting and is answered by the successor. A ``result`` is a read and is ``resendable``: a
shard lost under it has it sent on again, and no write is ever applied twice.

An ``execute``'s reply holds its run's handle besides the outcome; the resent ``result``'s
does not, so the handle is kept here until that reply and merged into it (the client sees the
reply its ``execute`` would have had). Only moved calls pay for this, never the hot path.
"""

from __future__ import annotations

import logging
from typing import Any

import msgpack

from ._protocol import decode_reply, encode_reply, encode_request

__all__ = ["MOVED", "Moves"]

log = logging.getLogger("weft_actors.bus")

MOVED = "workflow_moved"
"""The error code of a wait that goes on at the workflow's new owner."""


class Moves:
    """Moved calls resent as ``result``s, and the handles their replies get back."""

    __slots__ = ("handles",)

    def __init__(self) -> None:
        self.handles: dict[tuple[bytes, Any], dict[str, Any]] = {}
        """(client, request id) -> the run handle an ``execute``'s reply holds, until then."""

    def resend(self, client: bytes, request_id: Any, op: str, answer: bytes) -> tuple[bytes, str] | None:
        """The ``result`` request (frame, wid) that goes on with a moved call, or None if its
        answer does not say which workflow (then it is the client's reply, as it is)."""
        try:
            context = decode_reply(answer)["error"]["context"]
            wid, wait = context["wid"], float(context["wait"])
        except (ValueError, TypeError, KeyError, msgpack.UnpackException):
            return None
        if type(wid) is not str:
            return None
        if op == "execute":
            self.handles[(client, request_id)] = {"id": wid, "run_id": context.get("run_id")}
        log.debug("front door: %s for %s moved; resent as a result (%.1fs left)", op, wid, wait)
        return encode_request(request_id, "result", wid=wid, wait=wait), wid

    def reply(self, client: bytes, request_id: Any, answer: bytes, code: str | None) -> bytes:
        """The client's reply to a resent call: an ``execute``'s with its run's handle."""
        handle = self.handles.pop((client, request_id), None)
        if handle is None or code is not None:
            return answer
        try:
            value = decode_reply(answer)["ok"]
        except (ValueError, TypeError, KeyError, msgpack.UnpackException):
            return answer
        return encode_reply(request_id, {**handle, **value}) if isinstance(value, dict) else answer

    def dropped(self, client: bytes, request_id: Any) -> None:
        """A resent call answered otherwise (no shard became ready): forget its handle."""
        if self.handles:
            self.handles.pop((client, request_id), None)
