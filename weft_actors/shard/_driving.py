"""Driving claimed workflows in bounded slices of loop time.

Driving a workflow replays its op log on the loop thread: about 5 µs per op, so taking over
16,000 workflows of 60 ops each in one go blocked the loop for 4.5 s, past the lease's ttl,
and the taker's next heartbeat found it expired (and a restarted taker did the same again).
Here every drive that may come in bulk (a takeover, a delayed start, a revival by the feed
poll or a timer) is queued instead, and the queue is worked off in slices of at most
``DRIVE_SLICE`` seconds, each a loop callback of its own: heartbeats, commits, activity
outcomes and client requests run between two slices.

A queued workflow is held by this engine (its claim names this engine at the queued epoch,
and heartbeats keep it so), it only has no actor yet: its inbox is read whole when it is
driven, so nothing sent to it meanwhile is lost, and a message for it (``look_at``) drives it
at once, ahead of the queue. When the queue runs dry the driver asks the reclaimer for its
next chunk of candidates (``Reclaimer.take_more``): claims are taken about as fast as they are
driven, so other live engines can share a backlog instead of finding it all taken.

An engine without background tasks (``background=False``, tests that call ``tick()``) drives
at once, in the call that asked for it.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Final, Mapping, Protocol

if TYPE_CHECKING:
    from ..store import LmdbStore, ReplayRows
    from ._committer import GroupCommitter

__all__ = ["Driver", "DRIVE_SLICE"]

DRIVE_SLICE: Final = 0.02
"""Seconds of loop time one slice spends driving at most (it ends after the drive that
crosses it, so a slice is longer by at most one replay)."""
READ_AHEAD: Final = 64
"""Queued workflows whose rows a slice reads at most in one snapshot before driving them
(``load_many_for_replay``), where each read is a round trip (PostgreSQL): a handful of
statements for all of them instead of several each. What the slice does not drive is
dropped at its end, unused. On LMDB each drive reads its own rows, in place."""
FIRST_READ_AHEAD: Final = 8
"""The first read-ahead's size: it doubles up to ``READ_AHEAD`` while a read takes under a
quarter of a slice, and halves when it takes more, so long op logs never stall the loop."""

TAKEOVER: Final = ""
"""The wake kind of a queued drive that is not a revival (a takeover, a fired start)."""


class _Held(Protocol):
    @property
    def epoch(self) -> int: ...


class _Reclaims(Protocol):
    """The reclaimer, as the driver asks it for more when its queue runs dry."""

    @property
    def untaken(self) -> bool: ...

    def take_more(self) -> int: ...


class _Maintained(Protocol):
    @property
    def reclaimer(self) -> _Reclaims: ...


class _Revives(Protocol):
    def revived(self, wid: str, epoch: int, kind: str) -> object: ...


class DriveHost(Protocol):
    """What the driver needs of its engine: whether it runs, its loop (through the committer),
    the store to read ahead from, the live actors (by their epoch), a drive, a revival, and the
    reclaimer's backlog. The reclaimer and the evictor sit above the driver and feed it; it
    knows them only by these members."""

    @property
    def state(self) -> str: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def store(self) -> LmdbStore: ...

    @property
    def actors(self) -> Mapping[str, _Held]: ...

    @property
    def maintenance(self) -> _Maintained: ...

    @property
    def eviction(self) -> _Revives: ...

    def drive_or_orphan(self, wid: str, epoch: int) -> bool | None: ...


class Driver:
    """The queue of workflows this engine holds and has yet to drive, and its slices."""

    def __init__(self, engine: DriveHost, background: bool) -> None:
        self.engine = engine
        self.background = background
        self.queue: dict[str, tuple[int, str]] = {}
        """wid -> (epoch held, wake kind: ``TAKEOVER`` or the kind of the revival)."""
        self.slices = 0
        self._scheduled = False
        self.read_ahead: dict[str, ReplayRows] = {}
        """Rows read for the queued workflows this slice drives next (``drive`` takes them)."""
        self._ahead = FIRST_READ_AHEAD

    def __len__(self) -> int:
        return len(self.queue)

    def __contains__(self, wid: str) -> bool:
        return wid in self.queue

    def submit(self, wid: str, epoch: int, kind: str = TAKEOVER) -> None:
        """Drive ``wid`` (held here at ``epoch``) soon; at once without background tasks."""
        if not self.background:
            self._drive(wid, epoch, kind)
            return
        self.queue[wid] = (epoch, kind)
        self.schedule()

    def schedule(self) -> None:
        if not self._scheduled and self.engine.state == "running":
            self._scheduled = True
            self.engine.committer.loop.call_soon(self._slice)

    def drive_now(self, wid: str) -> bool:
        """Drive a queued ``wid`` ahead of the queue (someone is waiting on it); False if it
        is not queued."""
        entry = self.queue.pop(wid, None)
        if entry is None:
            return False
        self._drive(wid, *entry)
        return True

    def discard(self, wid: str) -> None:
        self.queue.pop(wid, None)

    def clear(self) -> None:
        self.queue.clear()

    def _slice(self) -> None:
        self._scheduled = False
        engine = self.engine
        if engine.state != "running":
            return
        self.slices += 1
        queue = self.queue
        deadline = time.perf_counter() + DRIVE_SLICE
        bulk = getattr(engine.store, "reads_cost_round_trips", False)
        try:
            while engine.state == "running":
                if not queue:
                    reclaimer = engine.maintenance.reclaimer
                    if not reclaimer.untaken:
                        return
                    reclaimer.take_more()
                if queue:
                    wid = next(iter(queue))
                    if bulk and wid not in self.read_ahead and len(queue) > 1:
                        self._read_ahead()
                    self._drive(wid, *queue.pop(wid))
                if time.perf_counter() >= deadline:
                    break
        finally:
            self.read_ahead.clear()  # a later slice reads afresh: others may have written since
        if engine.state == "running":
            self.schedule()

    def _read_ahead(self) -> None:
        """Read the rows of the next queued workflows in one snapshot (``FIRST_READ_AHEAD``);
        a failed read leaves each drive to read its own."""
        started = time.perf_counter()
        try:
            self.read_ahead = self.engine.store.load_many_for_replay(list(itertools.islice(self.queue, self._ahead)))
        except Exception:
            self.read_ahead = {}
        took = time.perf_counter() - started
        if took < DRIVE_SLICE / 4:
            self._ahead = min(READ_AHEAD, self._ahead * 2)
        else:
            self._ahead = max(1, self._ahead // 2)

    def _drive(self, wid: str, epoch: int, kind: str) -> None:
        engine = self.engine
        actor = engine.actors.get(wid)
        if actor is not None and actor.epoch == epoch:
            return  # driven meanwhile
        if kind == TAKEOVER:
            engine.drive_or_orphan(wid, epoch)
        else:
            engine.eviction.revived(wid, epoch, kind)
