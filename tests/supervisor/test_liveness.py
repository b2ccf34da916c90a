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
