"""While every write fails for the store (its map or disk full, read-only, I/O), nobody can
renew a lease. An engine that saw its own writes fail judges its lease from that failure, and
so does a peer judging others: once writes succeed again, each has a whole lease to renew
before anyone acts on its expiry, instead of every engine deposing itself and every
workflow counting a lost owner. On a real LMDB store, with a fake clock."""

from __future__ import annotations

import pytest

from weft_actors.store import Created, CreateWorkflow, LmdbStore
from weft_actors.codec import encode_args
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(30)

HEARTBEAT, TTL = 0.5, 3.0


def _writes_fail(store: LmdbStore) -> None:
    """What each failing write of ``store``'s process notes (a full map or disk, read-only,
    I/O: ``LmdbStore._write_failed`` and the map-full paths; ``test_disk_full`` makes a real
    disk refuse): this process saw a whole transaction fail now."""
    store._refusals.note(failed=True)


def test_a_lease_that_lapsed_while_every_write_failed_is_judged_from_the_failure(tmp_path):
    clock = FakeClock()
    owner_store = LmdbStore(str(tmp_path), clock=clock)
    peer_store = LmdbStore(str(tmp_path), clock=clock)
    try:
        owner, peer = "a" * 32, "b" * 32
        owner_store.register_engine(owner, heartbeat=HEARTBEAT, ttl=TTL)
        peer_store.register_engine(peer, heartbeat=HEARTBEAT, ttl=TTL)
        (created,) = owner_store.apply(owner, [CreateWorkflow("w", "T", encode_args(()), "r" * 32)])
        assert isinstance(created, Created) and created.created
        clock.advance(TTL - HEARTBEAT)
        for store in (owner_store, peer_store):  # both try to heartbeat; the store refuses
            _writes_fail(store)
        clock.advance(2 * HEARTBEAT + 1.0)  # past both leases: renewed 3.5 s ago, ttl + 2 beats = 4
        # The peer reads: the owner is not a lost engine to it, whose own writes failed too.
        assert "w" not in {wid for wid, _, _ in peer_store.reclaim_candidates(peer)}
        record = owner_store.heartbeat(owner)  # writes succeed again: not deposed, it renews
        assert record["state"] == "live"
        assert peer_store.heartbeat(peer)["state"] == "live"
        assert owner_store.get_holder("w")[0] == owner
        # A failure is no lease for ever: a whole lease after it, a silent engine expires.
        for _ in range(2):  # the peer beats; the owner stays silent past its lease
            clock.advance(TTL - HEARTBEAT)
            peer_store.heartbeat(peer)
        assert "w" in {wid for wid, _, _ in peer_store.reclaim_candidates(peer)}
    finally:
        owner_store.close()
        peer_store.close()
