"""A reading of the server's clock that a network cut held up does not move the lease clock.

``ServerClock`` took each reading at the midpoint of its round trip. A round trip held by a cut
for 2 s (the proxy keeps the request until the cut ends, then the server reads its clock at
once) put the midpoint a second early, and the lease clock ran a second ahead from then on: in
the PostgreSQL chaos runs a shard found its own lease lapsed right after a cut and deposed
itself, and peers judged others' leases lapsed early. A slow reading now only bounds the
offset: the estimate is kept while it fits what the reading allows."""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from _pausable_proxy import PausableProxy
from weft_actors.store._pg import PgStore

pytestmark = pytest.mark.timeout(60)

CUT = 2.0


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


def _error(store: PgStore, direct: psycopg.Connection[Any]) -> float:
    """How far ahead of the server's clock ``store``'s lease clock is (seconds; best of 5)."""
    errors = []
    for _ in range(5):
        before = store.clock.lease_now()
        row = direct.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        after = store.clock.lease_now()
        assert row is not None
        errors.append((before + after) / 2 - float(row[0]))
    return min(errors, key=abs)


def test_the_lease_clock_stays_on_the_servers_time_after_a_reading_held_up_by_a_cut(schema_url):
    with PausableProxy(urlsplit(schema_url).port or 5432) as proxy, psycopg.connect(schema_url, autocommit=True) as direct:
        store = PgStore(_through(schema_url, proxy.port))
        try:
            store.feed_head()  # a reading through the open proxy
            assert abs(_error(store, direct)) < 0.05
            proxy.pause()
            ends = threading.Timer(CUT, proxy.resume)
            ends.start()
            began = time.monotonic()
            store.feed_head()  # on this thread's connection: its reading waits out the cut
            assert time.monotonic() - began >= CUT - 0.1
            ends.join()
            error = _error(store, direct)
            assert abs(error) < 0.1, f"the lease clock is {error:+.2f} s off the server's after a {CUT:g} s cut"
            store.feed_head()  # and a reading without a cut keeps it there
            assert abs(_error(store, direct)) < 0.05
        finally:
            proxy.resume()
            store.close()
