"""Which shards are hung, and recording deaths without the watch loop ever waiting on a lock.

A shard is hung when its loop does not turn: its engine renewed nothing for a whole ttl
(``hung_reason``) and its loop slot's stamp (``store.loop_turning``, written by its watchdog
thread) shows no turn within its stall threshold; a loop that turns but cannot commit (its own
PostgreSQL backend stopped while holding the write lock) is kept from its store, not hung. The
supervisor kills a hung shard (SIGKILL) and restarts it through the normal path, which also frees
the store's write lock if it stalled holding it. A shard that only waits for that lock is not
hung: each shard publishes when it began to wait (the wait slot in its engine's lock file,
``LmdbStore.waiting_since``), and such a shard is left alone for ``LOCK_WAIT_GRACE`` ttls,
time enough for the holder to be killed, and for as long as its watchdog stamps its loop slot
while it waits (alive, only kept waiting: peers spare it the same way); on PostgreSQL the
waiting or holding transaction publishes the same (``PgStore.waiting_since``). A store that
refuses writes or cannot be reached silences every shard at once: that is no hang of theirs
(``judge_sparing_refusals``). The store writes that follow a death go through ``DeathRecorder``'s own thread:
marking an engine dead takes the write lock, and the loop that must kill a stalled holder can
never wait for it.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Final, NamedTuple, Sequence

import zmq

from ..bus import encode_hint, publisher
from ..errors import WeftError
from ..store import LOCK_WAIT_GRACE, AttestedWait, loop_turning, writes_refused

__all__ = ["DeathRecorder", "Judgement", "hung_reason", "judge_shards", "lock_holders", "judge_sparing_refusals", "store_refuses_writes", "LOCK_WAIT_GRACE", "SLOW_JUDGMENT"]

log = logging.getLogger("weft_actors.supervisor")

SLOW_JUDGMENT: Final = 0.25
"""Share of the ttl that the hang judgment's reads may take: past it, the store (its server,
or the way to it) was out of reach meanwhile, for the shards as much as for the supervisor."""


def hung_reason(record: dict[str, Any] | None, waiting_since: float, wall: float, ttl: float, ready_at: float = 0.0, turning: bool = False) -> str | None:
    """Why a ready shard whose engine record is ``record`` should be killed, or ``None``.

    ``waiting_since``: when it began to wait for the write lock, negated once it holds it
    (until that transaction commits), 0.0 outside a write;
    ``wall``: the time now on the records' lease clock (``Clock.lease_now``, blind to jumps of
    the wall clock); ``ready_at``: when the shard said it was
    ready (it has a whole ttl from then to heartbeat, however long its start took);
    ``turning``: its loop turned within its stall threshold (``store.loop_turning``): hung
    means a loop that does not turn, so a silent shard whose loop turns is only kept from its
    store (a server that stalls its writes) and is spared, however long. A record that is not live (another engine took over from it) means the shard is deposed
    and should be gone already.
    """
    if record is None:
        return None  # not registered yet, or pruned: nothing to judge by
    if record["state"] != "live":
        return f"its engine is marked {record['state']}"
    silent = wall - max(record["expires_at"] - record["ttl"], ready_at)
    if silent <= ttl or turning:
        return None
    if waiting_since > 0 and (wall - waiting_since < LOCK_WAIT_GRACE * ttl or isinstance(waiting_since, AttestedWait)):
        return None  # blocked behind another process's transaction (or a stalled server), not hung itself
    if waiting_since < 0 and wall + waiting_since < ttl:
        return None  # it got the lock a moment ago and commits what it could not meanwhile
    return f"it has not heartbeated for {silent:.1f} s (ttl {ttl:g} s)"  # its lock wait: ``lock_holders``


class Judgement(NamedTuple):
    records: dict[str, dict[str, Any]]
    """Every engine record, as read for the judgement."""
    wall: float
    """The lease clock's time the records were judged at."""
    reasons: list[str | None]
    """Per watched engine, why its shard is hung (``hung_reason``), or ``None``."""
    waits: list[float]
    """Per watched engine, its wait slot as read (``waiting_since``)."""


def judge_shards(store: Any, watched: Sequence[tuple[str, float]], ttl: float, refused_at: float = 0.0) -> Judgement:
    """Judge each watched ``(engine id, ready_at)`` by ``hung_reason``.

    Every wait slot is read before the records: a shard that finished its wait in between
    has committed its renewal into the records read next. Read the other way round, a
    shard let through the lock a moment ago (its stalled holder just killed) showed the
    stale record and no wait, and was killed too. ``refused_at``: when the store's
    filesystem last refused writes (lease clock): nobody could heartbeat then, so each shard
    has a whole ttl from that moment. A shard whose loop slot shows its loop turning is
    spared (``hung_reason``'s ``turning``). Raises what ``store.engines()`` raises."""
    waits = [store.waiting_since(engine_id) for engine_id, _ in watched]
    turning = [loop_turning(store.path, engine_id) for engine_id, _ in watched]
    records = store.engines()
    wall = store.clock.lease_now()  # the records' lease clock, blind to wall-clock jumps
    reasons = [
        hung_reason(records.get(engine_id), waiting, wall, ttl, max(ready_at, refused_at), turns)
        for (engine_id, ready_at), waiting, turns in zip(watched, waits, turning)
    ]
    return Judgement(records, wall, reasons, waits)


def lock_holders(watched: Sequence[Any], judged: Judgement) -> str:
    """For the log line of a kill: where every watched shard stood with the write lock, the
    killed one included (a waiter killed names who held it up, or that none of the shards
    did)."""
    parts = []
    for slot, waiting in zip(watched, judged.waits):
        if waiting < 0:
            parts.append(f"shard {slot.index} holds it {judged.wall + waiting:.2f} s")
        elif waiting > 0:
            parts.append(f"shard {slot.index} waits {judged.wall - waiting:.2f} s")
    return f" (write lock: {', '.join(parts) or 'no shard holds or waits for it'})"


def store_refuses_writes(store: Any) -> bool:
    """Whether nobody can write the store now: its filesystem is read-only or full (LMDB),
    or its server refuses writes or cannot be reached (PostgreSQL's ``writes_refused``)."""
    probe = getattr(store, "writes_refused", None)
    return bool(probe()) if probe is not None else writes_refused(store.path)


def judge_sparing_refusals(store: Any, watched: Sequence[tuple[str, float]], ttl: float, refused_at: float) -> tuple[Judgement | None, float]:
    """``judge_shards``, unless the store refuses writes or cannot be read now, and when it
    last did (returned, for the next call): nobody could heartbeat then, so every shard has a
    whole ttl from that moment, and a shard is never killed for an outage of the store. Reads
    that got their answers only after more than ``SLOW_JUDGMENT`` of the ttl count as such an
    outage, ending at the answer: a probe held up by a network cut answers "writable" once the
    cut ends, and the shards' silence during it was the store's; so does any round trip of this
    process that stalled before (``renewals_blocked_until``). ``None`` for no judgment:
    meanwhile nothing can be judged (and a lost server's reads would each wait out their bound
    on the supervisor's loop)."""
    # Once it is back, the shards may find it only after a hold-off (``rejoin_delay``).
    rejoin = getattr(store, "rejoin_delay", 0.0)
    refusing = store.clock.lease_now() + rejoin
    began = store.clock.monotonic()
    if store_refuses_writes(store):
        return None, refusing
    # Any read of this process that the store kept waiting (another thread's, or one on the
    # loop before this judgment) kept the shards' renewals waiting too.
    blocked = getattr(store, "renewals_blocked_until", None)
    if blocked is not None:
        refused_at = max(refused_at, blocked())
    try:
        judged = judge_shards(store, watched, ttl, refused_at)
    except Exception as exc:  # a read; the store may be briefly unreadable
        log.warning("cannot read the engine records: %s", exc)
        return None, refusing
    waited = store.clock.monotonic() - began
    if waited > ttl * SLOW_JUDGMENT:
        # The server kept these reads waiting (a network cut that ended while they were in
        # flight, a stalled server): it kept the shards' heartbeats waiting as long, so their
        # silence says nothing, and each has a whole ttl from the answer, as after a refusal.
        log.info("the store took %.2f s to answer the hang judgment's reads: no judgment, every shard has a ttl from now", waited)
        return None, store.clock.lease_now() + rejoin
    return judged, refused_at


class DeathRecorder:
    """Marks reaped shards' engines dead and publishes the hint, in a thread of its own (the
    PUB socket lives and dies there). ``record`` never blocks."""

    def __init__(self, store: Any, context: zmq.Context, hint_endpoint: str) -> None:
        self._store = store
        self._context = context
        self._endpoint = hint_endpoint
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="weft-deaths", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def record(self, engine_id: str) -> None:
        self._queue.put(engine_id)

    def stop(self, timeout: float = 5.0) -> None:
        """Record what is queued, then stop (waits ``timeout`` at most: the lock may be held)."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        sock = publisher(self._context, self._endpoint)
        try:
            while True:
                engine_id = self._queue.get()
                if engine_id is None:
                    return
                try:
                    self._store.mark_engine_dead(engine_id)
                    sock.send(encode_hint("engine-dead", engine_id), zmq.NOBLOCK)
                except (WeftError, zmq.ZMQError) as exc:
                    log.warning("could not mark engine %s dead: %s", engine_id, exc)
        finally:
            sock.close(0)
