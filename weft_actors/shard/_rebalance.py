"""Rebalancing after a resize: a running engine hands its parked workflows whose preferred
engine (rendezvous over the supervisor's live engines, ``_placement``) is now another one to
that engine, in bounded batches at a bounded rate, and keeps serving everything else.

Only parked workflows move, those that ``is_parked`` says lose nothing when dropped (no
commit in flight, no activity attempt running, no wake waiting) and those already evicted:
a parked live actor is evicted first (``Evictor.evict``, as a memory cap would), so every
candidate is just a claim and a timer wake here. The claims move by the handoff's fenced
transaction (``store.hand_off_claims``: only what this engine still holds at the epoch it
evicted at moves, at ``epoch + 1``), so a late write of this engine for a moved workflow is
fenced out. A batch is chosen, evicted, moved and forgotten in one loop turn, with no await
between: no request of this engine can revive a candidate halfway. What the successor
refuses stays here, evicted, woken as usual.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from .._placement import preferred
from ..errors import WeftError
from ..store import HandoffRefused, hand_off_claims
from ..workflow import SYSTEM_TYPES
from ._eviction import is_parked

__all__ = ["rebalance", "hand_parked"]

log = logging.getLogger("weft_actors.shard")

Wake = Callable[[str, list[str]], None]
"""Tells ``successor`` which workflows it now holds: ``wake(successor, ids)``."""


def hand_parked(host: Any, engine_id: str, engines: list[str], limit: int, wake: Wake) -> int:
    """One batch: up to ``limit`` parked workflows that ``engines`` place elsewhere, moved to
    their preferred engine; how many moved (0: nothing left to move, or none could)."""
    if host.state != "running":
        return 0
    eviction = host.eviction
    chosen: dict[str, str] = {}
    for wid, actor in list(host.actors.items()):
        if len(chosen) >= limit:
            break
        target = preferred(wid, engines)
        if target is not None and target != engine_id and is_parked(actor):
            eviction.evict(actor)
            chosen[wid] = target
    for wid in list(eviction.evicted):
        if len(chosen) >= limit:
            break
        target = preferred(wid, engines)
        if target is not None and target != engine_id:
            chosen.setdefault(wid, target)
    by_target: dict[str, list[tuple[str, int]]] = {}
    for wid, target in chosen.items():
        by_target.setdefault(target, []).append((wid, eviction.evicted[wid].epoch))
    moved = 0
    for target, claims in by_target.items():
        try:
            epochs = hand_off_claims(host.store, engine_id, target, claims, SYSTEM_TYPES)
        except HandoffRefused as exc:
            log.warning("engine %s: engine %s refused %d parked workflows (%s); they stay here", engine_id, target, len(claims), exc)
            continue
        except WeftError as exc:
            log.warning("engine %s: could not hand %d parked workflows to %s (%s); they stay here", engine_id, len(claims), target, exc)
            continue
        done = [wid for wid, epoch in epochs.items() if epoch is not None]
        for wid in done:
            eviction.forget(wid)
            host.wake_waiters(wid)  # a result() waiting here looks again: it is held elsewhere now
        if done:
            moved += len(done)
            wake(target, done)
    return moved


async def rebalance(engine: Any, engines: list[str], batch: int, interval: float, wake: Wake) -> int:
    """``hand_parked`` batch after batch, ``interval`` seconds apart (a bounded rate), until
    a batch moves nothing; how many moved in all."""
    host = engine._host  # package-internal: the actor table, eviction and store of the engine
    if host.maintenance.membership.enabled:
        return 0  # a shared store: every engine rebalances over all hosts' engines (``_membership``)
    total = 0
    while True:
        moved = hand_parked(host, engine.engine_id, engines, batch, wake)
        total += moved
        if not moved:
            break
        await asyncio.sleep(interval)
    if total:
        log.info("engine %s handed %d parked workflows to the engines that now prefer them", engine.engine_id, total)
    return total
