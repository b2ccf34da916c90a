"""After a PostgreSQL server restart, no lease counts as lapsed during the outage; nor, for a
process that opened after any outage, before it opened.

While the server was down nobody could renew a lease, yet its clock went on: an engine that
saw nothing of the outage (a shard started while the server was down, which only waited)
judged its peers by leases 10 s old the moment the server came back, and marked them expired
(two shards deposed in the two-supervisor ``down_kill`` run). A lease on the server's clock is
now counted as renewed no earlier than the server's start (``pg_postmaster_start_time``).

An outage with no restart leaves no such mark: a read-only spell (``default_transaction_read_only``)
refused every renewal for 10 s, and a shard started just as it ended took the workflows of a
healthy peer that had not yet renewed (``test_postgres_outages``, deposed). So a process also
counts every lease as renewed no earlier than its own opening: it saw none of the outage.
"""

from __future__ import annotations

import time
import uuid

import pytest

from _postgres import PostgresServer, find_bindir
from weft_actors.codec import encode_args
from weft_actors.errors import StorageError
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore

HEARTBEAT, TTL = 0.5, 1.5
GRACE = TTL + 2 * HEARTBEAT
"""How long past its last renewal a lease is judged lapsed (``_engines.expiry_time``)."""


def _taken(store: PgStore, me: str) -> int:
    """A reclaim pass of ``me``: how many workflows of lapsed engines it takes."""
    candidates = [(wid, holder) for wid, holder, _ in store.reclaim_candidates(me)]
    return sum(1 for epoch in store.takeover(me, candidates).values() if epoch is not None) if candidates else 0


@pytest.mark.timeout(90)
def test_a_peer_opened_after_a_restart_judges_no_lease_by_the_outage() -> None:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed")
    with PostgresServer(bindir) as server:
        owner = PgStore(server.url)  # the real server clock: leases are the server's
        engine = uuid.uuid4().hex
        owner.register_engine(engine, heartbeat=HEARTBEAT, ttl=TTL)
        for n in range(5):
            (created,) = owner.apply(engine, [CreateWorkflow(f"w-{n}", "Order", encode_args((n,)), uuid.uuid4().hex)])
            assert isinstance(created, Created)
        owner.close()  # its process lives on elsewhere; only its lease speaks for it now

        server.stop()
        time.sleep(GRACE + 1.0)  # down longer than a lease lasts
        server.start()

        peer = PgStore(server.url)  # a shard that started while the server was down
        try:
            judge = uuid.uuid4().hex
            peer.register_engine(judge, heartbeat=HEARTBEAT, ttl=TTL)
            assert _taken(peer, judge) == 0, "a lease was judged by the time the server was down"
            until = time.monotonic() + GRACE + 0.5  # no renewal since the server came back: then it has lapsed
            while time.monotonic() < until:
                peer.heartbeat(judge)  # the judge's own lease holds
                time.sleep(HEARTBEAT / 2)
            assert _taken(peer, judge) == 5
        finally:
            peer.close()


@pytest.mark.timeout(60)
def test_a_peer_opened_after_an_outage_without_restart_gives_lapsed_leases_a_ttl(schema_url: str) -> None:
    owner = PgStore(schema_url)
    engine = uuid.uuid4().hex
    owner.register_engine(engine, heartbeat=HEARTBEAT, ttl=TTL)
    for n in range(5):
        (created,) = owner.apply(engine, [CreateWorkflow(f"w-{n}", "Order", encode_args((n,)), uuid.uuid4().hex)])
        assert isinstance(created, Created)
    owner.env.conn.execute("SET default_transaction_read_only = on")  # a read-only spell, for its session
    until = time.monotonic() + GRACE + 1.0
    while time.monotonic() < until:  # its renewals are refused: the lease lapses
        with pytest.raises(StorageError):
            owner.heartbeat(engine)
        time.sleep(HEARTBEAT)
    owner.env.conn.execute("SET default_transaction_read_only = off")  # the spell ends

    peer = PgStore(schema_url)  # a shard that started as the spell ended
    try:
        judge = uuid.uuid4().hex
        peer.register_engine(judge, heartbeat=HEARTBEAT, ttl=TTL)
        assert _taken(peer, judge) == 0, "a lease was judged by a time its judge never saw"
        owner.heartbeat(engine)  # the owner renews in time: it keeps its workflows
        until = time.monotonic() + GRACE + 0.5
        while time.monotonic() < until:
            peer.heartbeat(judge)
            owner.heartbeat(engine)
            assert _taken(peer, judge) == 0
            time.sleep(HEARTBEAT / 2)
        owner.close()  # now it stops renewing: its lease lapses in the judge's sight
        until = time.monotonic() + GRACE + 0.5
        while time.monotonic() < until:
            peer.heartbeat(judge)
            time.sleep(HEARTBEAT / 2)
        assert _taken(peer, judge) == 5
    finally:
        peer.close()
