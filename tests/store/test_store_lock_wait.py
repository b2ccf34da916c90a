"""An engine's own lease and the write lock: time spent waiting for another process's
transaction is no stall of this engine, and must not depose it; yet once anyone has acted on
its expiry (a takeover, a feed prune past its cursor), no stale time lets it commit again."""

from __future__ import annotations

import threading
from typing import Any

import pytest

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
