"""PostgreSQL judges engine leases by the database server's clock, never a host's: hosts whose
clocks disagree by an hour neither depose each other early nor keep a dead one alive."""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

import psycopg
import pytest

from weft_actors._clock import SystemClock
from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore

pytestmark = pytest.mark.timeout(60)

HEARTBEAT, TTL = 0.2, 0.6


class SkewedClock(SystemClock):
    """A host whose wall clock is ``skew`` seconds off (NTP broken, a VM resumed)."""

    __slots__ = ("skew",)

    def __init__(self, skew: float) -> None:
        self.skew = skew

    def now(self) -> float:
        return time.time() + self.skew

    def lease_now(self) -> float:
        return time.clock_gettime(time.CLOCK_BOOTTIME) + self.skew



def server_now(url: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])


def start_one(store: Any, engine_id: str) -> str:
    wid = "w-" + uuid.uuid4().hex[:8]
    (created,) = store.apply(engine_id, [CreateWorkflow(wid, "Order", encode_args((1,)), uuid.uuid4().hex)])
    assert isinstance(created, Created) and created.status == "running", created
    return wid


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_leases_are_written_and_judged_on_the_servers_clock(schema_url):
    ahead, behind = PgStore(schema_url, clock=SkewedClock(3600.0)), PgStore(schema_url, clock=SkewedClock(-3600.0))
    try:
        assert ahead.clock.lease_clock == behind.clock.lease_clock
        assert ahead.clock.lease_clock.startswith("postgresql:")
        fast, slow = uuid.uuid4().hex, uuid.uuid4().hex
        ahead.register_engine(fast, heartbeat=HEARTBEAT, ttl=TTL)
        behind.register_engine(slow, heartbeat=HEARTBEAT, ttl=TTL)
        record = behind.engines()[fast]
        # An hour-fast host's lease ends ttl after the server's now, not an hour later.
        assert abs(record["expires_at"] - (server_now(schema_url) + TTL)) < 1.0
        wid = start_one(ahead, fast)
        # Neither judges the other expired while both renew: an hour behind sees no candidate.
        for _ in range(5):
            ahead.heartbeat(fast)
            behind.heartbeat(slow)
            assert wid not in {w for w, _, _ in behind.reclaim_candidates(slow)}
            time.sleep(HEARTBEAT / 2)
        # Once the fast host stops renewing, the slow one sees it lapse after ttl + 2 heartbeats
        # of server time: not an hour early, not an hour late.
        stopped = time.monotonic()
        wait_until(lambda: wid in {w for w, _, _ in behind.reclaim_candidates(slow)}, 10.0, "the stopped engine to lapse")
        waited = time.monotonic() - stopped
        assert TTL <= waited <= TTL + 2 * HEARTBEAT + 1.5, waited
    finally:
        ahead.close()
        behind.close()


def test_a_test_clock_keeps_judging_leases(schema_url):
    from weft_actors.testing import FakeClock

    clock = FakeClock()
    store = PgStore(schema_url, clock=clock)
    try:
        assert store.clock is clock
        engine_id = uuid.uuid4().hex
        store.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
        assert store.engines()[engine_id]["expires_at"] == pytest.approx(clock.lease_now() + TTL, abs=1e-3)
    finally:
        store.close()


def clock_skew(store: Any, url: str) -> float:
    """How far ``store``'s estimate of the server's clock is from the server's clock, read on a
    fresh connection (one short round trip: its midpoint is the reading's local time)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        sent = time.monotonic()
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        received = time.monotonic()
    assert row is not None
    estimate_offset = store.clock.lease_now() - time.monotonic()
    return estimate_offset - (float(row[0]) - (sent + received) / 2)


@pytest.mark.parametrize("wait", [1.5, 4.5])
def test_a_wait_for_the_write_lock_does_not_skew_the_server_clock(schema_url, wait):
    """The clock is read once the lock is held: the wait before it is the server's, not the
    network's, and the estimate stays within a round trip of the truth however long it was
    (4.5 s: longer than one request for the lock, which is then asked for again)."""
    import threading

    store = PgStore(schema_url)
    engine_id = uuid.uuid4().hex
    store.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
    assert abs(clock_skew(store, schema_url)) < 0.1
    holder = psycopg.connect(schema_url, autocommit=True)
    watcher = psycopg.connect(schema_url, autocommit=True)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (store.env.lock_key,))
        beat = threading.Thread(target=store.heartbeat, args=(engine_id,), name="heartbeat")
        beat.start()

        def queued() -> bool:
            row = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s::oid",
                (store.env.lock_key,),
            ).fetchone()
            return row is not None and row[0] > 0

        wait_until(queued, 10.0, "the heartbeat to wait for the lock")
        # The holder works (not idle: no waiter may end it) for ``wait`` seconds, then lets go.
        holder.execute("SELECT pg_sleep(%s)", (wait,))
        holder.execute("ROLLBACK")
        beat.join(10.0)
        assert not beat.is_alive()
        skew = clock_skew(store, schema_url)
        assert abs(skew) < 0.1, f"the server clock estimate is {skew:+.3f} s off after a {wait} s wait"
        record = store.engines()[engine_id]
        assert abs(record["expires_at"] - (server_now(schema_url) + TTL)) < 0.2  # its lease is ttl long
    finally:
        holder.close()
        watcher.close()
        store.close()
