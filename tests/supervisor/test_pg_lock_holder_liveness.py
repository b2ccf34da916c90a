"""On PostgreSQL a shard that has just won the write lock is not hung: its transaction
publishes that it holds the lock (``_take_lock``'s held label), as LMDB's wait slot does, and
the supervisor's judgment spares it while it commits the renewal it waited to write. Before,
only a wait was visible: the winner, still renewing, was judged silent and killed."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from _processes import wait_until
from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore
from weft_actors.supervisor._liveness import judge_shards
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(60)

HEARTBEAT = 0.5
TTL = 1.0


def test_a_shard_holding_the_write_lock_after_a_stall_is_spared_and_then_judged_again(schema_url):
    clock = FakeClock()
    shard, supervisor = PgStore(schema_url, clock=clock), PgStore(schema_url, clock=clock)
    engine_id = uuid.uuid4().hex
    try:
        shard.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
        clock.advance(TTL + 0.3)  # silent past its ttl (it waited behind a stalled holder), not yet expired
        seen: list[Any] = []

        def judge_while_holding() -> None:
            seen.append((supervisor.waiting_since(engine_id), judge_shards(supervisor, [(engine_id, 0.0)], TTL).reasons))

        shard.before_commit = judge_while_holding  # inside the transaction, holding the lock
        (created,) = shard.apply(engine_id, [CreateWorkflow("w", "Order", encode_args((1,)), uuid.uuid4().hex)])
        assert isinstance(created, Created) and created.created, created
        ((since, reasons),) = seen
        assert since < 0.0 and -since == pytest.approx(clock.lease_now(), abs=0.5), since
        assert reasons == [None]  # committing its renewal: spared
        shard.before_commit = None
        assert supervisor.waiting_since(engine_id) == 0.0  # committed: nothing published any more
        assert judge_shards(supervisor, [(engine_id, 0.0)], TTL).reasons == [None]  # renewed
        clock.advance(TTL + 0.3)
        reason = judge_shards(supervisor, [(engine_id, 0.0)], TTL).reasons[0]
        assert reason is not None and "not heartbeated" in reason  # silent again, holding nothing
    finally:
        shard.close()
        supervisor.close()


def test_a_wait_for_the_write_lock_is_published_while_it_waits(schema_url):
    clock = FakeClock()
    shard, supervisor = PgStore(schema_url, clock=clock), PgStore(schema_url, clock=clock)
    engine_id = uuid.uuid4().hex
    holder = psycopg.connect(schema_url, autocommit=True)
    try:
        shard.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (shard.env.lock_key,))  # another writer holds it
        done: list[Any] = []
        writer = threading.Thread(target=lambda: done.append(shard.apply(engine_id, [CreateWorkflow("w", "Order", encode_args((1,)), uuid.uuid4().hex)])))
        writer.start()
        since = wait_until(lambda: max(supervisor.waiting_since(engine_id), 0.0), 1.5, "the wait published")
        assert since == pytest.approx(clock.lease_now(), abs=1e-3)
        holder.execute("COMMIT")
        writer.join(10)
        assert done and isinstance(done[0][0], Created), done
        assert supervisor.waiting_since(engine_id) == 0.0
    finally:
        holder.close()
        shard.close()
        supervisor.close()
