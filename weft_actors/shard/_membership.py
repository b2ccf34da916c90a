"""Rebalancing across hosts: when the set of live engines on a shared store changes (a
supervisor joins or leaves a PostgreSQL store, a shard of another host restarts), each engine
hands the parked workflows whose preferred engine is now another one to that engine, by the
same fenced handoff as a resize (``_rebalance.hand_parked``), at a bounded rate.

No supervisor sees the engines of another host and no control pipe crosses hosts, so every
engine decides for itself, from what its maintenance pass reads anyway (the live engines and
the types each runs, ``Reclaimer.live_engines``): the check costs one set comparison per
pass, nothing per workflow, and the batches run only after a change. The moved workflows'
successors hear of them by the handoff's durable marks (``store._handed``) at their next
reclaim pass.

Why it cannot thrash: every engine places a workflow by rendezvous over the same set (the
live engines that run every type of its app; a peer that does not say what it runs counts,
as for the reclaim pass), and a workflow moves only to its preferred engine, which prefers
itself under that set, so a workflow moves at most once per membership change. A set is
acted on only once it was seen at two passes in a row (a lease that flaps for one pass moves
nothing), and a new change stops the batches of the old one. Only parked workflows move
(``is_parked``): a running one, an attempt in flight, a commit under way never does. An
engine that is draining moves nothing (``hand_parked`` checks its state).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final, Mapping

from ..workflow import SYSTEM_TYPES
from ._rebalance import hand_parked

__all__ = ["Membership", "MOVE_BATCH", "MOVE_INTERVAL", "placement_set"]

log = logging.getLogger("weft_actors.shard")

MOVE_BATCH: Final = 200
MOVE_INTERVAL: Final = 0.1
"""After a change each engine moves at most ``MOVE_BATCH`` parked workflows per
``MOVE_INTERVAL`` seconds (2,000/s an engine, as after a resize): the newcomers' replays
never swamp them, and the front doors keep serving meanwhile."""


def placement_set(own: frozenset[str], offers: Mapping[str, frozenset[str] | None]) -> frozenset[str]:
    """The live engines a workflow of an app running ``own`` types may be placed on: those
    that run every one of them (or did not say what they run)."""
    return frozenset(engine_id for engine_id, types in offers.items() if types is None or own <= types)


class Membership:
    """Watches the live engines pass after pass and rebalances the parked workflows of
    ``host`` (an ``ActorHost``) after a change. ``enabled`` is False on a store that only one
    supervisor can open (LMDB): there its resize rebalances, told by the supervisor."""

    def __init__(self, host: Any, enabled: bool) -> None:
        self.host = host
        self.enabled = enabled
        self._seen: frozenset[str] | None = None
        """The set the last pass saw."""
        self._acted: frozenset[str] = frozenset()
        """The set the last rebalancing placed over (empty: none yet)."""
        self._task: asyncio.Task[int] | None = None
        self.moved = 0
        """Parked workflows handed away by rebalancing, in all."""

    def check(self, offers: Mapping[str, frozenset[str] | None]) -> None:
        """One maintenance pass's look at the live engines (``offers``: engine -> the types it
        runs, this engine included); starts the batches once a changed set is seen twice."""
        if not self.enabled:
            return
        own = frozenset(name for name in self.host.workflows if name not in SYSTEM_TYPES)  # records do not list those
        current = placement_set(own, offers)
        seen, self._seen = self._seen, current
        if current != seen or current == self._acted:
            return  # not settled yet, or already acted on
        if self.host.engine_id not in current:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a pass run before the loop (the engine's first): the next one acts
            return
        self._acted = current
        self.cancel()
        if len(current) > 1:
            self._task = loop.create_task(self._run(sorted(current)))

    async def _run(self, engines: list[str]) -> int:
        host = self.host
        total = 0
        while True:
            moved = hand_parked(host, host.engine_id, engines, MOVE_BATCH, _no_wake)
            total += moved
            self.moved += moved
            if not moved:
                break
            await asyncio.sleep(MOVE_INTERVAL)
        if total:
            log.info("engine %s handed %d parked workflows to the engines that now prefer them (%d live engines)", host.engine_id, total, len(engines))
        return total

    def cancel(self) -> None:
        """Stop the batches under way (a newer change, or the engine stops)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()


def _no_wake(target: str, wids: list[str]) -> None:
    """The successor may be on another host: its next reclaim pass finds the handoff's marks."""
