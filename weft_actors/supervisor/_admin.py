"""The ``shards`` op: the supervisor's answer to ``python -m weft_actors shards ...``.

``list`` is each shard slot (pid, engine, workflows owned and in flight, state) and the
rolling restart's progress; ``restart`` asks for a rolling restart (``_roll``), ``set`` for a
resize to ``count`` shards (``_resize``). Called in the
front door's thread: it reads what the main loop writes (plain attributes, each read whole)
and asks the main loop for changes, never makes them itself.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import InvalidRequest
from ._resize import MAX_SHARDS
from ._roll import Roll

__all__ = ["ShardsAdmin", "slot_state"]

ACTIONS = ("list", "restart", "set")


def slot_state(slot: Any, draining: set[int]) -> str:
    """``serving``, ``draining`` (handing its workflows off) or ``starting`` (no ready process)."""
    if slot.index in draining:
        return "draining"
    return "serving" if slot.process is not None and slot.ready else "starting"


class ShardsAdmin:
    def __init__(self, slots: Sequence[Any], draining: set[int], roll: Roll) -> None:
        self._slots = slots
        self._draining = draining
        self._roll = roll

    def __call__(self, request: dict[str, Any]) -> Any:
        action = request["action"]
        if action == "list":
            return self.list()
        if action == "restart":
            return self._roll.request("shards restart")
        if action == "set":
            count = request.get("count")
            if count is None or not 1 <= count <= MAX_SHARDS:
                raise InvalidRequest(f"shards set needs a number of shards from 1 to {MAX_SHARDS}, not {count!r}", count=count)
            return self._roll.request(f"shards set {count}", count)
        raise InvalidRequest(f"unknown shards action {action!r}; expected one of {', '.join(ACTIONS)}", action=action)

    def list(self) -> dict[str, Any]:
        shards = []
        for slot in list(self._slots):
            stats = slot.stats
            shards.append({
                "slot": slot.index,
                "pid": slot.pid,
                "engine_id": slot.engine_id,
                "state": slot_state(slot, self._draining),
                "owned": stats.get("claims_active"),
                "in_flight": stats.get("workflows_in_flight"),
                "activities_inflight": stats.get("activities_inflight"),
            })
        return {"shards": shards, "roll": self._roll.report()}
