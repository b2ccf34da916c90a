"""An engine cut off from its PostgreSQL server judges no peer's lease by the time of the cut.

A network cut stops every renewal that goes its way: after a cut longer than a lease, the first
engine through found its peers' leases lapsed on the server's clock and took their workflows,
and they were deposed (the PostgreSQL chaos runs: shards deposed and killed after each cut of a
few seconds). A round trip that stalls past ``STALLED`` now floors the process's view of
renewals (``Refusals.floor_now``): a peer's lease lapses only once it has had a ttl of reachable
store in this process's sight to renew it, and a peer that stays silent then is taken over."""

from __future__ import annotations

import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from _pausable_proxy import PausableProxy
from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore

pytestmark = pytest.mark.timeout(60)

HEARTBEAT, TTL = 0.2, 0.6
CUT = 2.0
"""Past the peer's lease (ttl + 2 heartbeats), within the read bound."""


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


def test_a_taker_held_up_by_a_cut_takes_nothing_over_until_its_peer_had_a_ttl_to_renew(schema_url):
    with PausableProxy(urlsplit(schema_url).port or 5432) as proxy:
        peer, taker = PgStore(schema_url), PgStore(_through(schema_url, proxy.port))
        peer_id, taker_id = uuid.uuid4().hex, uuid.uuid4().hex
        try:
            peer.register_engine(peer_id, heartbeat=HEARTBEAT, ttl=TTL)
            taker.register_engine(taker_id, heartbeat=HEARTBEAT, ttl=TTL)
            wid = "w-" + uuid.uuid4().hex[:8]
            (created,) = peer.apply(peer_id, [CreateWorkflow(wid, "Order", encode_args((1,)), uuid.uuid4().hex)])
            assert isinstance(created, Created) and created.created, created
            assert wid not in [found[0] for found in taker.reclaim_candidates(taker_id)]
            # The cut: the taker's read waits it out; the peer, cut off too, renews nothing.
            proxy.pause()
            ends = threading.Timer(CUT, proxy.resume)
            ends.start()
            began = time.monotonic()
            taker.feed_head()
            assert time.monotonic() - began >= CUT - 0.1
            ends.join()
            cut_ended = time.monotonic()
            candidates = [found[0] for found in taker.reclaim_candidates(taker_id)]
            assert wid not in candidates, "taken over for a lease that lapsed while the taker itself was cut off"
            # The peer stays silent after the cut: its workflow is taken over a lease later.
            while wid not in [found[0] for found in taker.reclaim_candidates(taker_id)]:
                assert time.monotonic() - cut_ended < TTL + 2 * HEARTBEAT + 3.0, "a silent peer was never taken over"
                time.sleep(0.05)
            assert time.monotonic() - cut_ended >= TTL + 2 * HEARTBEAT - 0.2
        finally:
            proxy.resume()
            taker.close()
            peer.close()
