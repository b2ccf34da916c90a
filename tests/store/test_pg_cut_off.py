"""A host cut off from its PostgreSQL server fails its reads and writes within seconds, and
carries on when the network returns. Every connection has TCP keepalives and a user timeout,
and every round trip is bounded in the client (``_pg._connect``): the cut here is a proxy
that stops forwarding, which no TCP timer notices (its kernel acknowledges every byte), so
only the client's own bound ends the wait. Before, a read through it blocked for as long as
the connection lasted (on a real network, ~15 minutes of TCP retransmission)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from _pausable_proxy import PausableProxy
from weft_actors.codec import encode_args
from weft_actors.errors import StorageError
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore
from weft_actors.store._pg._connect import READ_LIMIT

pytestmark = pytest.mark.timeout(90)

BOUND = READ_LIMIT + 3.0
"""The longest a read or write may take while cut off (the bound, and a loaded machine)."""


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


def _timed(call: Any) -> tuple[float, Any]:
    """``call()`` in a thread, waited for ``BOUND`` + 5 s at most: (seconds taken, result or
    exception); a call still blocked then is reported as taking forever."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(call())
        except Exception as exc:
            box.append(exc)

    began = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND + 5.0)
    return (time.monotonic() - began if box else float("inf")), (box[0] if box else None)


def test_reads_and_writes_fail_within_seconds_while_cut_off_and_succeed_once_it_returns(schema_url):
    with PausableProxy(urlsplit(schema_url).port or 5432) as proxy:
        store = PgStore(_through(schema_url, proxy.port))
        engine_id = uuid.uuid4().hex
        try:
            assert "tcp_user_timeout=5000" in store.env.conn.info.dsn and "keepalives_idle" in store.env.conn.info.dsn
            store.register_engine(engine_id, heartbeat=1.0, ttl=30.0)
            assert store.get_workflow("w0") is None
            proxy.pause()
            took, outcome = _timed(lambda: store.get_workflow("w1"))
            assert took < BOUND, f"a read blocked {took:.1f} s while cut off"
            assert isinstance(outcome, StorageError) and outcome.reason == "unreachable", outcome
            took, outcome = _timed(lambda: store.apply(engine_id, [CreateWorkflow("w1", "Order", encode_args((1,)), uuid.uuid4().hex)]))
            assert took < BOUND, f"a commit blocked {took:.1f} s while cut off"
            assert isinstance(outcome[0], StorageError), outcome
            assert store.write_state() == "unreachable"
            proxy.resume()
            (created,) = store.apply(engine_id, [CreateWorkflow("w1", "Order", encode_args((1,)), uuid.uuid4().hex)])
            assert isinstance(created, Created) and created.created, created
            assert store.get_workflow("w1") is not None
            assert store.write_state() == "ok"
        finally:
            proxy.resume()
            store.close()
