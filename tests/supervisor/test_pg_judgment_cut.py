"""A network cut between the supervisor and its PostgreSQL server that ends while the
supervisor's hang judgment is waiting for its reads is no evidence of a hang. The shards were
cut off as long (their heartbeats waited on the same server), yet the judgment's probe got its
answer, "writable", once the cut ended, and the records then showed every shard silent for the
whole cut: in the PostgreSQL chaos runs a healthy shard was killed as hung right after a 3 s
cut. A judgment whose reads waited more than ``SLOW_JUDGMENT`` of the ttl is now no judgment,
and every shard gets a ttl from the answer, as after a refusal."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from _pausable_proxy import PausableProxy
from weft_actors.store._pg import PgStore
from weft_actors.supervisor._liveness import judge_sparing_refusals

pytestmark = pytest.mark.timeout(60)

HEARTBEAT = 0.2
TTL = 0.6
CUT = 1.5
"""Seconds the supervisor's way to the server is cut: past the ttl, within the read bound."""


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


def test_a_judgment_held_up_by_a_cut_that_ends_kills_nobody_and_a_silent_shard_is_judged_after(schema_url):
    with PausableProxy(urlsplit(schema_url).port or 5432) as proxy:
        shard, supervisor = PgStore(schema_url), PgStore(_through(schema_url, proxy.port))
        engine_id = uuid.uuid4().hex
        try:
            shard.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
            watched = [(engine_id, 0.0)]
            judged, refused_at = judge_sparing_refusals(supervisor, watched, TTL, 0.0)
            assert judged is not None and judged.reasons == [None]  # it just registered
            # The cut: the supervisor's reads wait; the shard heartbeats no more (it is cut off
            # too), and the cut ends before the read bound ends a wait.
            proxy.pause()
            box: list[Any] = []
            judging = threading.Thread(target=lambda: box.append(judge_sparing_refusals(supervisor, watched, TTL, refused_at)), daemon=True)
            judging.start()
            time.sleep(CUT)
            proxy.resume()
            judging.join(20)
            assert box, "the judgment never returned"
            judged, refused_at = box[0]
            assert judged is None or judged.reasons == [None], f"killed for a cut it did not cause: {judged.reasons}"
            # Right after, with answers at once: the shard has a ttl from the cut's end.
            judged, refused_at = judge_sparing_refusals(supervisor, watched, TTL, refused_at)
            assert judged is not None and judged.reasons == [None], judged
            # A shard that stays silent with the server answering at once is still judged hung.
            deadline = time.monotonic() + 15
            while True:
                judged, refused_at = judge_sparing_refusals(supervisor, watched, TTL, refused_at)
                if judged is not None and judged.reasons[0] is not None:
                    break
                assert time.monotonic() < deadline, "a silent shard was never judged hung"
                time.sleep(0.05)
            assert "not heartbeated" in judged.reasons[0]
        finally:
            proxy.resume()
            supervisor.close()
            shard.close()


def test_a_judgment_right_after_a_cut_that_held_up_another_read_kills_nobody(schema_url):
    """The cut held up a read of the supervisor's other than the judgment's (its loop serving
    something else meanwhile): the judgment that follows gets fast answers, yet the shards
    were as cut off as that read."""
    with PausableProxy(urlsplit(schema_url).port or 5432) as proxy:
        shard, supervisor = PgStore(schema_url), PgStore(_through(schema_url, proxy.port))
        engine_id = uuid.uuid4().hex
        try:
            shard.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
            watched = [(engine_id, 0.0)]
            judged, refused_at = judge_sparing_refusals(supervisor, watched, TTL, 0.0)
            assert judged is not None and judged.reasons == [None]
            proxy.pause()
            ends = threading.Timer(CUT, proxy.resume)
            ends.start()
            supervisor.feed_head()  # waits out the cut
            ends.join()
            judged, refused_at = judge_sparing_refusals(supervisor, watched, TTL, refused_at)
            assert judged is not None and judged.reasons == [None], f"killed for a cut it did not cause: {judged.reasons}"
        finally:
            proxy.resume()
            supervisor.close()
            shard.close()
