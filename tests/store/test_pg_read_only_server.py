"""A PostgreSQL server that refuses writes (a demoted primary, ``default_transaction_read_only``)
still opens a store whose schema is current, serves its reads, and refuses each write with a
``StorageError`` whose reason is ``read_only``. Before, opening ran ``CREATE TABLE IF NOT
EXISTS`` in a read-only transaction and failed, so every replacement shard crashed at start."""

from __future__ import annotations

import uuid

import pytest

from weft_actors.codec import encode_args
from weft_actors.errors import StorageError
from weft_actors.store import CreateWorkflow, is_read_only
from weft_actors.store._pg import PgStore

pytestmark = pytest.mark.timeout(60)


def test_a_read_only_server_opens_a_current_store_serves_reads_and_refuses_writes_clearly(schema_url):
    store = PgStore(schema_url)
    engine_id = uuid.uuid4().hex
    store.register_engine(engine_id, heartbeat=0.5, ttl=3.0)
    store.apply(engine_id, [CreateWorkflow("before", "Order", encode_args((1,)), uuid.uuid4().hex)])
    store.close()
    read_only_url = schema_url + "%20-cdefault_transaction_read_only%3Don"  # every session refuses writes
    reopened = PgStore(read_only_url)
    try:
        assert reopened.get_workflow("before") is not None
        assert reopened.writes_refused()
        (refused,) = reopened.apply(engine_id, [CreateWorkflow("after", "Order", encode_args((1,)), uuid.uuid4().hex)])
        assert isinstance(refused, StorageError) and is_read_only(refused), refused
        assert "refuses writes" in str(refused)
        assert reopened.write_state() == "read_only"
        with pytest.raises(StorageError) as raised:
            reopened.register_engine(uuid.uuid4().hex, heartbeat=0.5, ttl=3.0)
        assert is_read_only(raised.value)
    finally:
        reopened.close()
    writable = PgStore(schema_url)
    try:
        assert not writable.writes_refused()
        assert writable.get_workflow("after") is None
    finally:
        writable.close()
