"""A process stopped inside a write transaction must not hold PostgreSQL's write lock, and with
it every writer on every host, for ever: the server ends its session after
``LOCK_HOLD_LIMIT`` idle seconds, rolls its transaction back, and the others write again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore
from weft_actors.store._pg._env import LOCK_HOLD_LIMIT

pytestmark = pytest.mark.timeout(60)

CHILD = """
import sys, time
from weft_actors.codec import encode_args
from weft_actors.store import CreateWorkflow
from weft_actors.store._pg import PgStore
store = PgStore(sys.argv[1])
store.register_engine(sys.argv[2], heartbeat=0.5, ttl=3.0)
with store.env.begin(write=True) as txn:
    txn.put(b"stalled-wid", b"x", db=store.dbs.workflows)
    print("holding", flush=True)
    sys.stdin.readline()  # stopped here; continued, it tries to commit
print("committed", flush=True)
"""



def test_a_writer_stopped_inside_its_transaction_frees_the_lock_and_commits_nothing(schema_url):
    store = PgStore(schema_url)
    engine_id = uuid.uuid4().hex
    store.register_engine(engine_id, heartbeat=0.5, ttl=3.0)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, schema_url, uuid.uuid4().hex],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "holding"
        os.kill(child.pid, signal.SIGSTOP)
        began = time.monotonic()
        (created,) = store.apply(engine_id, [CreateWorkflow("after", "Order", encode_args((1,)), uuid.uuid4().hex)])
        waited = time.monotonic() - began
        assert isinstance(created, Created) and created.created, created
        assert waited < LOCK_HOLD_LIMIT + 2.0, waited
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=20)
        assert "committed" not in out
        assert "StorageError" in err  # its session was ended: the commit fails, loudly
        assert store.get_workflow("stalled-wid") is None
        assert store.get_workflow("after") is not None
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait(10)
        store.close()


PIPELINE_HOLDER = """
import sys, time
from weft_actors.store._pg._env import PgEnvironment
env = PgEnvironment(sys.argv[1])
conn = env.conn
with conn.pipeline():  # as a writer stopped right after a pipelined round trip
    conn.execute("BEGIN")
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (env.lock_key,)).fetchone()
print("holding", flush=True)
time.sleep(120)
"""


def test_a_holder_silent_after_a_pipeline_is_ended_by_the_next_writer(schema_url):
    """After a pipeline the server's idle timer is off (its Flush message stops it): the
    writer that waits for the lock ends the silent holder itself."""
    store = PgStore(schema_url)
    engine_id = uuid.uuid4().hex
    store.register_engine(engine_id, heartbeat=0.5, ttl=3.0)
    child = subprocess.Popen([sys.executable, "-c", PIPELINE_HOLDER, schema_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "holding"
        began = time.monotonic()
        (created,) = store.apply(engine_id, [CreateWorkflow("after", "Order", encode_args((1,)), uuid.uuid4().hex)])
        waited = time.monotonic() - began
        assert isinstance(created, Created) and created.created, created
        assert waited < 2 * LOCK_HOLD_LIMIT + 2.0, waited
    finally:
        child.kill()
        child.wait(10)
        store.close()
