"""The hang check of shards that are handing off (``_handoffs``): they are watched too.

A shard told to hand off leaves the routing and is no longer ``ready``, which the hang check
(``_liveness``) used to require: a shard that hung during its handoff (a loop blocked by an
activity, a wait that never ends) was never killed, and its workflows stayed with it. So a
draining shard is judged like a ready one, with its clock started at the end of its grace
(it may spend the grace letting its attempts finish, heartbeating as usual, then it stops its
maintenance to move its claims): past the grace plus the usual ttl with no heartbeat and no
loop turn, it is killed as hung.

Its engine record turns ``stopped`` once it has handed off and released what was left, a
moment before its process exits: that is no hang, unless the process is still there a ttl
past its grace.
"""

from __future__ import annotations

from typing import Any, Collection, Sequence

__all__ = ["DrainWatch"]


class DrainWatch:
    """When each draining slot began to drain (lease clock), and how its judgment reads."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since: dict[int, float] = {}

    def clocks(self, draining: Collection[int], now: float, grace: float) -> dict[int, float]:
        """slot -> when its hang clock starts (its drain's start, first seen ``now``, plus the
        ``grace``), for each slot in ``draining``; those no longer draining are forgotten."""
        since = self._since
        for index in [index for index in since if index not in draining]:
            del since[index]
        for index in draining:
            since.setdefault(index, now)
        return {index: start + grace for index, start in since.items()}

    @staticmethod
    def reasons(watched: Sequence[Any], reasons: list[str | None], records: dict[str, dict[str, Any]], wall: float, clocks: dict[int, float], ttl: float) -> list[str | None]:
        """``reasons`` (``hung_reason``'s, per watched slot) with a draining slot's ended
        engine record read as its exit on the way, until a ttl past its grace."""
        judged = list(reasons)
        for position, slot in enumerate(watched):
            clock = clocks.get(slot.index)
            if clock is None or judged[position] is None:
                continue
            record = records.get(slot.engine_id or "")
            if record is not None and record["state"] != "live":
                late = wall - clock
                judged[position] = None if late <= ttl else f"its engine is {record['state']} and it has not exited {late:.1f} s after its handoff's grace (ttl {ttl:g} s)"
        return judged
