"""An engine's own lease and the write lock: time spent waiting for another process's
transaction is no stall of this engine, and must not depose it; yet once anyone has acted on
its expiry (a takeover, a feed prune past its cursor), no stale time lets it commit again."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest

from _support import asleep_on_lock
from weft_actors.errors import EngineDeposed
from weft_actors.store import Created

pytestmark = pytest.mark.timeout(30)

PAST_EXPIRY = 10.0
"""Seconds the clock runs while an engine waits: far past ttl + 2 x heartbeat (4 s)."""


class _Call(threading.Thread):
    """``fn()`` in a thread; ``outcome()`` is its result or the exception it raised."""

    def __init__(self, fn: Any) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self._outcome: list[Any] = []

    def run(self) -> None:
        try:
            self._outcome.append(self._fn())
        except BaseException as exc:  # handed to the test
            self._outcome.append(exc)

    def outcome(self) -> Any:
        self.join(10)
        assert self._outcome, "the call never returned"
        return self._outcome[0]


class _LaggingClock:
    """The test's clock, except that the next ``lease_now()`` after ``lag()`` is ``stale``:
    an engine that read the time, then stalled before it took the write lock."""

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._stale: float | None = None
        self.lease_clock = clock.lease_clock

    def lag(self, stale: float) -> None:
        self._stale = stale

    def now(self) -> float:
        return self._clock.now()

    def lease_now(self) -> float:
        stale, self._stale = self._stale, None
        return self._clock.lease_now() if stale is None else stale

    def monotonic(self) -> float:
        return self._clock.monotonic()


def _outlive(kit: Any, fake_clock: Any, engine_id: str) -> None:
    """Run the clock past the expiry of every engine but ``engine_id``, which heartbeats."""
    for _ in range(2):
        fake_clock.advance(kit.TTL - kit.HEARTBEAT)
        kit.store.heartbeat(engine_id)


def _blocked_call(store_factory: Any, store: Any, fake_clock: Any, backend_hook: Any, fn: Any) -> Any:
    """Run ``fn`` while another thread holds the write lock; the clock runs ``PAST_EXPIRY``
    while ``fn`` waits for it. Returns ``fn``'s outcome."""
    hold = backend_hook("hold_write_lock")
    with hold(store) as wait_blocked:
        call = _Call(fn)
        call.start()
        wait_blocked(call)
        fake_clock.advance(PAST_EXPIRY)
    return call.outcome()


def test_a_heartbeat_that_waited_for_the_write_lock_past_expiry_keeps_the_lease(store_factory, kit, fake_clock, backend_hook):
    eid = kit.engine()
    record = _blocked_call(store_factory, kit.store, fake_clock, backend_hook, lambda: kit.store.heartbeat(eid))
    assert not isinstance(record, Exception), record
    # Extended from the time the lock was granted, not from the time before the wait.
    assert record["expires_at"] == pytest.approx(fake_clock.now() + kit.TTL, abs=1e-3)
    assert kit.store.engine(eid)["state"] == "live"
    kit.start(eid)  # and it goes on committing


def test_a_commit_that_waited_for_the_write_lock_past_expiry_is_applied(store_factory, kit, fake_clock, backend_hook):
    eid = kit.engine()
    intent = kit.create_intent()
    results = _blocked_call(store_factory, kit.store, fake_clock, backend_hook, lambda: kit.store.apply(eid, [intent]))
    assert not isinstance(results, Exception), results
    (created,) = results
    assert isinstance(created, Created) and created.created, created
    assert kit.store.engine(eid)["expires_at"] == pytest.approx(fake_clock.now() + kit.TTL, abs=1e-3)
    assert kit.store.get_holder(intent.wid)[0] == eid


def test_a_takeover_that_waited_for_the_write_lock_judges_its_own_lease_before_the_wait(store_factory, kit, fake_clock, backend_hook):
    gone, taker = kit.engine(), kit.engine()
    wid, _, epoch = kit.start(gone)
    fake_clock.advance(kit.TTL)  # gone is silent; taker beats, then waits past its own expiry
    kit.store.heartbeat(taker)
    candidates = [(wid, kit.store.get_holder_bytes(wid))]
    won = _blocked_call(store_factory, kit.store, fake_clock, backend_hook, lambda: kit.store.takeover(taker, candidates))
    assert won == {wid: epoch + 1}


def test_a_takeover_from_an_expired_engine_marks_it_and_its_stale_time_passes_nothing(store_factory, kit, fake_clock):
    stalled_store = store_factory()
    clock = _LaggingClock(fake_clock)
    stalled_store.clock = clock
    stalled = kit.engine(stalled_store)
    wid, run_id, epoch = kit.start(stalled, store=stalled_store)
    taker = kit.engine()
    before = fake_clock.lease_now()

    _outlive(kit, fake_clock, taker)
    candidates = [(w, holder) for w, holder, _ in kit.store.reclaim_candidates(taker)]
    assert kit.store.takeover(taker, candidates) == {wid: epoch + 1}
    assert kit.store.engine(stalled)["state"] == "expired"

    # It read the time before the takeover and only then got the lock: the mark refuses it.
    clock.lag(before)
    with pytest.raises(EngineDeposed, match="expired"):
        stalled_store.heartbeat(stalled)
    clock.lag(before)
    (result,) = stalled_store.apply(stalled, [kit.create_intent()])
    assert isinstance(result, EngineDeposed)
    clock.lag(before)
    assert stalled_store.release_engine(stalled) == 0
    assert kit.store.get_holder(wid)[0] == taker


def test_a_takeover_from_an_engine_still_live_marks_nothing(kit):
    owner, other = kit.engine(), kit.engine()
    wid, _, epoch = kit.start(owner)
    assert kit.store.takeover(other, [(wid, kit.store.get_holder_bytes(wid))]) == {wid: epoch + 1}
    assert kit.store.engine(owner)["state"] == "live"
    kit.store.heartbeat(owner)  # it only lost that workflow


def test_a_feed_prune_that_passes_an_expired_engines_cursor_marks_it(kit, fake_clock):
    silent, pruner = kit.engine(), kit.engine()
    _outlive(kit, fake_clock, pruner)
    kit.store.prune_feed(pruner, kit.store.feed_head(), retention=0.0)
    assert kit.store.engine(silent)["state"] == "expired"
    assert kit.store.engine(pruner)["state"] == "live"



# -- peers and an engine that waits for the write lock ---------------------------------------
#
# An engine blocked behind other processes' transactions cannot heartbeat. Its own check
# passes once it gets the lock (it judges by the time before the wait), so a peer that acted
# on its lapsed lease meanwhile would depose a healthy engine: one long transaction or slow
# fsync would take every engine queued behind it down with it.

LAPSED = 4.5
"""Seconds past a renewal at which the lease has lapsed (ttl 3 + 2 x heartbeat 0.5 = 4), yet
within ``LOCK_WAIT_GRACE`` (2 ttls = 6 s) of a wait that began at that renewal."""


def _create_later(kit: Any, store: Any, engine_id: str) -> _Call:
    """``engine_id`` creating a workflow through ``store``, in a thread (not yet started)."""
    return _Call(lambda: store.apply(engine_id, [kit.create_intent()]))


def _created(call: _Call) -> None:
    (created,) = call.outcome()
    assert isinstance(created, Created) and created.created, created


def test_a_write_that_waits_for_the_lock_says_so_to_every_process(store_factory, kit, fake_clock, backend_hook):
    waiter_store = store_factory()
    waiter = kit.engine(waiter_store)
    began = fake_clock.lease_now()
    assert kit.store.waiting_since(waiter) == 0.0
    with backend_hook("hold_write_lock")(kit.store) as wait_blocked:
        call = _create_later(kit, waiter_store, waiter)
        call.start()
        wait_blocked(call)
        assert kit.store.waiting_since(waiter) == pytest.approx(began, abs=1e-3)
    _created(call)
    assert kit.store.waiting_since(waiter) == 0.0  # out of the write again
    waiter_store.close()
    assert kit.store.waiting_since(waiter) == 0.0  # its process let go: nobody waits there


def test_a_peer_lists_nothing_of_an_engine_that_waits_for_the_lock_until_the_grace_runs_out(store_factory, kit, fake_clock, backend_hook):
    waiter_store = store_factory()
    waiter, peer = kit.engine(waiter_store), kit.engine()
    wid, _, _ = kit.start(waiter, store=waiter_store)
    with backend_hook("hold_write_lock")(kit.store) as wait_blocked:
        call = _create_later(kit, waiter_store, waiter)
        call.start()
        wait_blocked(call)
        fake_clock.advance(LAPSED)  # the reclaim pass reads; it needs no lock
        assert wid not in {w for w, _, _ in kit.store.reclaim_candidates(peer)}
        fake_clock.advance(2 * kit.TTL)  # past the grace: a wait that long is judged again
        if store_factory.name == "postgresql":
            # Unless the server shows the wait going on now (``AttestedWait``): a session queued
            # for the lock asks for it again every ``LOCK_HOLD_LIMIT`` or leaves the queue.
            assert wid not in {w for w, _, _ in kit.store.reclaim_candidates(peer)}
        else:
            assert wid in {w for w, _, _ in kit.store.reclaim_candidates(peer)}
    call.outcome()


def test_a_takeover_that_judges_an_engine_queued_behind_it_does_not_depose_it(store_factory, kit, fake_clock, backend_hook):
    waiter_store = store_factory()
    waiter, taker = kit.engine(waiter_store), kit.engine()
    wid, _, epoch = kit.start(waiter, store=waiter_store)
    candidates = [(wid, kit.store.get_holder_bytes(wid))]
    take = _Call(lambda: kit.store.takeover(taker, candidates))
    create = _create_later(kit, waiter_store, waiter)
    with backend_hook("hold_write_lock")(kit.store) as wait_blocked:
        take.start()
        wait_blocked(take)  # on PostgreSQL: queued on the server, whose lock queue is FIFO
        if store_factory.name == "lmdb":
            asleep_on_lock(take)  # asleep on the futex: the lock is handed to it first
        create.start()
        wait_blocked(create)
        fake_clock.advance(LAPSED)  # the waiter's lease lapses while both wait
    # The takeover judged the waiter's lapsed lease holding the lock the waiter queued for.
    assert take.outcome() == {wid: epoch + 1}
    assert kit.store.engine(waiter)["state"] == "live"
    _created(create)  # let through, it goes on committing


def test_a_wait_slot_is_trusted_for_a_wait_begun_in_time_and_for_the_grace_only(store_factory, kit, fake_clock, backend_hook):
    publish = backend_hook("publish_wait")
    frozen_store = store_factory()  # another process's: this one's writes publish for its own
    for since, spared in ((None, False), (1.0, True), (LAPSED + 0.5, False)):
        frozen, pruner = kit.engine(frozen_store), kit.engine()
        renewed = fake_clock.lease_now()
        # Its process published a wait ``since`` s after its last renewal (None: none), then
        # froze before it reached the lock.
        publish(frozen, 0.0 if since is None else renewed + since)
        _outlive(kit, fake_clock, pruner)  # 5 s: lapsed, within the grace of a wait at 1 s
        kit.store.prune_feed(pruner, kit.store.feed_head(), retention=0.0)
        assert kit.store.engine(frozen)["state"] == ("live" if spared else "expired"), since
        if spared:
            _outlive(kit, fake_clock, pruner)  # 10 s from the wait: past the grace of 6
            kit.store.prune_feed(pruner, kit.store.feed_head(), retention=0.0)
            assert kit.store.engine(frozen)["state"] == "expired"  # the grace ran out


# -- a write gives way to a peer starved of the lock -----------------------------------------
#
# LMDB's write lock is not fair: a process that commits again at once wins it over a woken
# waiter not yet run, so on a loaded machine a waiter could starve past its lease while its
# peers commit. A writer lets a peer that has waited longer than its heartbeat go first.


def _in_function(thread: threading.Thread, name: str, timeout: float = 10.0) -> None:
    """Return once ``thread`` runs inside a function called ``name``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)  # type: ignore[arg-type]
        while frame is not None:
            if frame.f_code.co_name == name:
                return
            frame = frame.f_back
        time.sleep(0.001)
    raise AssertionError(f"{thread.name} never entered {name}")


def test_a_write_lets_a_peer_starved_of_the_lock_go_first(store_factory, kit, fake_clock, backend_hook):
    waiter_store = store_factory()
    waiter, writer = kit.engine(waiter_store), kit.engine()
    kit.store.heartbeat(writer)  # each heartbeat maps the peers' wait slots
    order: list[str] = []
    waiter_store.before_commit = lambda: order.append("waiter")
    kit.store.before_commit = lambda: order.append("writer")
    starved = _create_later(kit, waiter_store, waiter)
    late = _create_later(kit, kit.store, writer)
    with backend_hook("hold_write_lock")(kit.store) as wait_blocked:
        starved.start()
        wait_blocked(starved)
        fake_clock.advance(kit.HEARTBEAT + 0.1)  # it has waited longer than its heartbeat
        late.start()
        if hasattr(kit.store, "gave_way"):
            _in_function(late, "_give_way")  # it does not queue for the lock: it gives way
        else:  # PostgreSQL's lock queue is first come, first served: it queues behind
            wait_blocked(late)
    _created(starved)
    _created(late)
    assert order == ["waiter", "writer"]
    assert getattr(kit.store, "gave_way", 1) == 1


def test_a_waiter_that_never_reaches_the_lock_is_given_way_once(store_factory, kit, fake_clock, backend_hook):
    publish = backend_hook("publish_wait")
    frozen_store = store_factory()
    frozen, writer = kit.engine(frozen_store), kit.engine()
    publish(frozen, fake_clock.lease_now())  # then it froze (or died) before the lock
    fake_clock.advance(kit.HEARTBEAT + 0.1)
    kit.store.heartbeat(writer)  # maps the slot, and gives way to it, briefly
    for _ in range(3):
        (created,) = kit.store.apply(writer, [kit.create_intent()])
        assert isinstance(created, Created) and created.created, created
    assert kit.store.gave_way == 1  # once for that wait, however many writes follow
