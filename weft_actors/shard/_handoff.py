"""The graceful handoff of an engine's workflows to a named successor (``Engine.hand_off``).

A plain stop (``close_runtime``) abandons the activity attempts in flight (they run again on
the next owner) and releases every claim for whichever live engine's reclaim pass takes it.
A handoff is the primitive a rolling restart and a resize build on, and does better:

1. new workflows are refused (``Overloaded``, retryable: the caller starts them elsewhere) and
   no new activity attempt starts (they wait in the runner's queue, never begun);
2. the attempts already running finish, up to ``grace`` seconds, and their outcomes are
   committed by the actors as usual (what still runs after the grace is abandoned, as today);
3. the actors stop, and the claims move to the successor by fenced handoff transactions of at
   most ``HANDOFF_BATCH`` workflows (``store._handoff``): each checks that this engine still
   holds the workflow at the epoch it read and writes the successor at ``epoch + 1``, so a late
   write of this engine for it is fenced out;
4. the successor is woken with the ids moved (``wake``), and drives them at once (each move
   also leaves a durable mark its next reclaim pass reads, should the wake be lost);
5. what is left (the successor is gone, refuses, or a batch fails) is released as at a stop,
   and the engine is marked stopped; calls still waiting here fail with ``EngineStopped``
   (a shard server answers a waiting ``result``/``execute`` ``WorkflowMoved`` instead).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

from ..errors import EngineStopped, WeftError
from ..store import HANDOFF_BATCH, HandoffRefused, hand_off_claims, held_claims
from ..workflow import SYSTEM_TYPES
from ._lifecycle import StopHost, shut_down, stop_actors

if TYPE_CHECKING:
    from ._starting import Starts

__all__ = ["hand_off_runtime", "Wake"]

log = logging.getLogger("weft_actors.shard")

Wake = Callable[[list[str]], None]
"""Tells the successor which workflows it now holds (called once per batch moved): the fast
path. A workflow held by a live engine is no reclaim candidate, so a lost wake would leave it
undriven; the handoff's durable marks (``store._handed``) bring it to the successor's next
reclaim pass all the same."""

BATCH = HANDOFF_BATCH
"""Claims one handoff transaction moves (a test may lower it)."""

_POLL = 0.01
"""Seconds between two looks at the activities still running during the grace."""


async def _settle(host: StopHost, grace_ends: float) -> int:
    """Wait until no activity attempt runs and every outcome reported is committed, or the
    grace ends; the number of attempts still running then (abandoned, as at a stop)."""
    loop = asyncio.get_running_loop()
    activities, committer = host.activities, host.committer
    quiet = 0
    while loop.time() < grace_ends and host.state == "running":
        await committer.drain()
        if activities.inflight == 0 and not committer._intents and not committer._in_flight:  # nothing left to commit
            quiet += 1
            if quiet >= 3:  # an outcome's step and its commit take a few loop turns
                return 0
            await asyncio.sleep(0)
            continue
        quiet = 0
        await asyncio.sleep(_POLL)
    return activities.inflight


async def _move(host: StopHost, engine_id: str, successor: str, wake: Wake | None) -> int:
    """Hand every claim this engine holds to ``successor``, ``BATCH`` to a transaction; how
    many moved. The claims are read first (one snapshot per page), then written batch by
    batch with a loop turn between two batches: a write moves only what is still this
    engine's at the epoch read (the fence), so whatever other engines commit meanwhile (a
    terminate, a deadline) is never undone. Stops at the first refusal or failure: the rest is
    released by the caller."""
    store = host.store
    claims: list[tuple[str, int]] = []
    while page := held_claims(store, engine_id, claims[-1][0].encode() if claims else b"", BATCH):
        claims += page
    moved = 0
    for start in range(0, len(claims), BATCH):
        if start:
            await asyncio.sleep(0)
        try:
            epochs = hand_off_claims(store, engine_id, successor, claims[start : start + BATCH], SYSTEM_TYPES)
        except HandoffRefused as exc:
            log.warning("engine %s: successor refused the handoff (%s); releasing instead", engine_id, exc)
            return moved
        except WeftError as exc:
            log.warning("engine %s: handoff to %s failed (%s); releasing the rest", engine_id, successor, exc)
            return moved
        batch = [wid for wid, epoch in epochs.items() if epoch is not None]
        moved += len(batch)
        if batch and wake is not None:
            try:
                wake(batch)
            except Exception:  # not driven until the successor restarts: say so loudly
                log.exception("engine %s: could not wake successor %s", engine_id, successor)
    return moved


async def hand_off_runtime(host: StopHost, starts: Starts, engine_id: str, successor: str, grace: float, wake: Wake | None) -> int | None:
    """``Engine.hand_off``: the number of workflows handed to ``successor`` (the rest was
    released), or None if the engine was not running (or was deposed on the way)."""
    if host.state != "running":
        return None
    loop = asyncio.get_running_loop()
    starts.handing_off = True
    activities = host.activities
    activities.max_inflight = 0  # queued attempts stay queued: never begun, never run twice
    abandoned = await _settle(host, loop.time() + grace)
    if host.state != "running":
        return None
    if abandoned:
        log.warning("engine %s: %d activity attempts still ran after the %.1fs grace; they run again on the next owner", engine_id, abandoned, grace)
    host.state = "stopping"
    await host.maintenance.stop()
    await host.committer.drain()
    if host.state == "deposed":  # that last commit found this engine deposed
        return None
    stop_actors(host)
    if host.watchdog is not None:
        host.watchdog.released()
    moved = await _move(host, engine_id, successor, wake)
    try:
        released = host.store.release_engine(engine_id)
    except WeftError as exc:
        log.warning("could not release claims of engine %s: %s", engine_id, exc)
        released = 0
    log.info("engine %s handed %d workflows to %s (%d released)", engine_id, moved, successor, released)
    shut_down(host, EngineStopped("engine stopped: its workflows were handed off"))
    return moved
