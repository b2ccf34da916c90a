"""The pausable proxy of the PostgreSQL fault tests (``_pausable_proxy``) forwards at loopback
speed while it is open. It once did not: its sockets kept Nagle's algorithm, which holds each
small write of a pipelined round trip until the peer's delayed ACK (~40 ms a hop), so every
store read through it took ~90 ms. In the chaos runs on PostgreSQL that blocked each shard's
loop for tenths of a second at every maintenance pass, and the supervisor rightly killed
shards whose loops did not turn: a slowness of the harness, not of the engine."""

from __future__ import annotations

import statistics
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from _pausable_proxy import PausableProxy
from weft_actors.store._pg import PgStore

pytestmark = pytest.mark.timeout(60)


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


def _median_read(store: PgStore, reads: int = 40) -> float:
    took = []
    for _ in range(reads):
        began = time.perf_counter()
        store.feed_head()
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def test_a_store_read_through_the_open_proxy_costs_milliseconds_not_tens_of_them(schema_url):
    with PausableProxy(urlsplit(schema_url).port or 5432) as proxy:
        direct, proxied = PgStore(schema_url), PgStore(_through(schema_url, proxy.port))
        try:
            base = _median_read(direct)
            through = _median_read(proxied)
        finally:
            proxied.close()
            direct.close()
    # A read is three round trips; before, each cost ~30-40 ms through the proxy.
    assert through < base + 0.015, f"a read took {through * 1e3:.1f} ms through the proxy, {base * 1e3:.1f} ms direct"
