"""A live engine whose connection to PostgreSQL drops for a moment keeps its workflows.

The server frees an engine's liveness lock when its connection ends, and a connection also
ends under a live process (a network blip, a restarted server, an administrator). A peer's
reclaim pass that runs in that gap must not take the free lock for a death: only an expired
lease (or the engine's own supervisor) says that. The engine reconnects at its next
transaction, takes its lock again, and goes on committing for the workflows it holds.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest

from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore
from weft_actors.store._pg._store import _int4
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(60)

HEARTBEAT, TTL = 0.5, 3.0


def lock_holder(admin: psycopg.Connection[Any], store: Any, engine_id: str) -> int | None:
    """The server pid of the session holding ``engine_id``'s liveness lock, or None."""
    row = admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
        "AND classid = %s::oid AND objid = (%s::int4)::oid",
        (store.env.lock_key, _int4(engine_id)),
    ).fetchone()
    return None if row is None else int(row[0])


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def reclaim_pass(store: Any, me: str) -> int:
    """A peer's reclaim pass, as ``shard._reclaim`` runs it: a peer whose process looks gone
    is marked dead, then every candidate is taken over. Returns how many were taken."""
    for engine_id in store.live_engines():
        if engine_id != me and store.process_gone(engine_id):
            store.mark_engine_dead(engine_id)
    candidates = [(wid, holder) for wid, holder, _ in store.reclaim_candidates(me)]
    return sum(1 for epoch in store.takeover(me, candidates).values() if epoch is not None) if candidates else 0


def test_a_connection_blip_leaves_a_live_engine_its_workflows_and_its_lock(schema_url: str) -> None:
    clock = FakeClock()
    live, peer = PgStore(schema_url, clock=clock), PgStore(schema_url, clock=clock)
    admin = psycopg.connect(schema_url, autocommit=True)
    try:
        engine, judge = uuid.uuid4().hex, uuid.uuid4().hex
        live.register_engine(engine, heartbeat=HEARTBEAT, ttl=TTL)
        peer.register_engine(judge, heartbeat=HEARTBEAT, ttl=TTL)
        wids = []
        for n in range(20):
            wid = f"blip-{n}"
            (created,) = live.apply(engine, [CreateWorkflow(wid, "Order", encode_args((n,)), uuid.uuid4().hex)])
            assert isinstance(created, Created) and created.created, created
            wids.append(wid)
        old_pid = live.env.backend_pid()
        assert lock_holder(admin, live, engine) == old_pid

        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (old_pid,))
        wait_until(lambda: lock_holder(admin, live, engine) is None, 5.0, "the server to free the lock")

        # In the gap: the lock is free, the lease holds. Nobody judges the engine dead.
        assert peer.process_gone(engine) is False
        assert reclaim_pass(peer, judge) == 0
        assert peer.engines()[engine]["state"] == "live"

        # The engine's next transaction reconnects, takes its lock again and commits.
        live.heartbeat(engine)
        new_pid = live.env.backend_pid()
        assert new_pid != old_pid
        assert lock_holder(admin, live, engine) == new_pid
        (created,) = live.apply(engine, [CreateWorkflow("blip-after", "Order", encode_args((0,)), uuid.uuid4().hex)])
        assert isinstance(created, Created) and created.created, created
        assert all(live.get_holder(wid)[0] == engine for wid in wids)
        assert reclaim_pass(peer, judge) == 0
    finally:
        admin.close()
        live.close()
        peer.close()


def test_a_free_lock_counts_once_the_lease_has_expired(schema_url: str) -> None:
    """The hint is not ignored: an engine whose lock is free and whose lease expired on the
    judge's lease clock is gone, and its workflows move."""
    clock = FakeClock()
    gone, peer = PgStore(schema_url, clock=clock), PgStore(schema_url, clock=clock)
    try:
        engine, judge = uuid.uuid4().hex, uuid.uuid4().hex
        gone.register_engine(engine, heartbeat=HEARTBEAT, ttl=TTL)
        (created,) = gone.apply(engine, [CreateWorkflow("orphan", "Order", encode_args((1,)), uuid.uuid4().hex)])
        assert isinstance(created, Created)
        gone.close()
        assert peer.process_gone(engine) is False  # free, but its lease holds
        clock.advance(TTL + 2 * HEARTBEAT + 0.1)
        peer.register_engine(judge, heartbeat=HEARTBEAT, ttl=TTL)
        assert peer.process_gone(engine) is True
        assert reclaim_pass(peer, judge) == 1
        assert peer.engines()[engine]["state"] in ("dead", "expired")
    finally:
        peer.close()
