"""The supervisor's judgment of a hung shard, on records and times given by hand."""

from __future__ import annotations

from weft_actors.supervisor._liveness import hung_reason

TTL = 3.0
NOW = 1_700_000_000.0


def _record(renewed_ago: float, state: str = "live") -> dict:
    return {"state": state, "ttl": TTL, "heartbeat": 0.5, "expires_at": NOW - renewed_ago + TTL}


def test_a_shard_that_renews_within_a_ttl_is_not_hung():
    assert hung_reason(_record(TTL), 0.0, NOW, TTL) is None
    assert hung_reason(None, 0.0, NOW, TTL) is None


def test_a_shard_silent_for_more_than_a_ttl_is_hung():
    assert "not heartbeated for 3.1 s" in hung_reason(_record(TTL + 0.1), 0.0, NOW, TTL)


def test_a_shard_waiting_for_the_write_lock_is_spared_for_two_ttls_only():
    record = _record(2 * TTL)
    assert hung_reason(record, NOW - 1.5 * TTL, NOW, TTL) is None
    assert hung_reason(record, NOW - 2.5 * TTL, NOW, TTL) is not None


def test_a_shard_whose_engine_was_taken_over_or_marked_dead_is_hung_even_while_it_waits():
    assert "marked expired" in hung_reason(_record(0.0, "expired"), NOW - 0.1, NOW, TTL)
    assert hung_reason(_record(0.0, "dead"), 0.0, NOW, TTL) is not None


def test_a_shard_gets_a_whole_ttl_from_the_time_it_was_ready():
    assert hung_reason(_record(10 * TTL), 0.0, NOW, TTL, ready_at=NOW - 1.0) is None
    assert hung_reason(_record(10 * TTL), 0.0, NOW, TTL, ready_at=NOW - TTL - 0.1) is not None


def test_a_shard_that_just_got_the_write_lock_after_a_wait_is_spared_while_it_commits():
    # It waited behind a stalled holder past its own ttl; the holder was killed and it got the
    # lock: its renewal is being committed. One that has held the lock for a ttl is hung.
    record = _record(1.5 * TTL)
    assert hung_reason(record, -(NOW - 0.1), NOW, TTL) is None
    assert hung_reason(record, -(NOW - TTL - 0.1), NOW, TTL) is not None


def test_a_shard_let_through_the_lock_between_the_reads_is_judged_by_its_renewal(tmp_path):
    """The supervisor reads each shard's wait slot, then the records. A shard that finishes
    its wait in between has committed its renewal into the records it reads next; read the
    other way round, its stale record and empty slot got it killed the moment its stalled
    lock holder was (seen in the chaos runs)."""
    from weft_actors.store import LmdbStore
    from weft_actors.supervisor._liveness import judge_shards
    from weft_actors.testing import FakeClock

    clock = FakeClock()
    shard_store, supervisor_store = LmdbStore(str(tmp_path), clock=clock), LmdbStore(str(tmp_path), clock=clock)
    try:
        shard_store.register_engine("a" * 32, heartbeat=0.5, ttl=TTL)
        clock.advance(TTL + 0.5)  # silent past its ttl, as while it waited for the lock
        read = supervisor_store.waiting_since

        def slot_read_as_the_wait_ends(engine_id: str) -> float:
            since = read(engine_id)
            shard_store.heartbeat(engine_id)  # let through: its renewal commits at once
            return since

        supervisor_store.waiting_since = slot_read_as_the_wait_ends  # type: ignore[method-assign]
        judged = judge_shards(supervisor_store, [("a" * 32, 0.0)], TTL)
        assert judged.reasons == [None]
        clock.advance(TTL + 0.5)  # and silent again, with no wait: hung
        supervisor_store.waiting_since = read  # type: ignore[method-assign]
        assert "not heartbeated" in (judge_shards(supervisor_store, [("a" * 32, 0.0)], TTL).reasons[0] or "")
    finally:
        shard_store.close()
        supervisor_store.close()
