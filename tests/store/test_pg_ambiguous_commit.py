"""A connection lost during ``COMMIT`` leaves its outcome unknown to the client: the server
may have committed. The store asks the server (``txid_status`` of the transaction, on a new
connection) and reports what happened: the batch's real results if it committed, a failure
if it did not. Reporting a committed batch as failed would tell a caller that a start, a
signal or a step was lost when it is in the store.

Both cases on a real server: a proxy between the two closes the client's connection right
after passing its ``COMMIT`` on (the server makes the commit; its reply is never read), or the
server ends the session before the commit reaches it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest

from _commit_cutter import CommitCutter, release_commit, release_once_held, slow_commits
from weft_actors.codec import encode_args
from weft_actors.errors import StorageError
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import _outcome
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(60)


def open_store(url: str) -> Any:
    from weft_actors.store._pg import PgStore

    return PgStore(url, clock=FakeClock())


def test_a_commit_whose_reply_was_lost_reports_what_the_server_committed(schema_url: str) -> None:
    cutter = CommitCutter(schema_url)
    store = open_store(cutter.url(schema_url))
    try:
        engine = uuid.uuid4().hex
        store.register_engine(engine, heartbeat=0.5, ttl=3.0)
        store.before_commit = cutter.armed.set
        intent = CreateWorkflow("wf-lost-reply", "Order", encode_args((1,)), uuid.uuid4().hex)
        (result,) = store.apply(engine, [intent])
        store.before_commit = None
        assert cutter.cut.is_set()  # the commit's reply was lost
        assert isinstance(result, Created) and result.created, result
        assert store.get_workflow("wf-lost-reply")["status"] == "running"
        (again,) = store.apply(engine, [CreateWorkflow("wf-after", "Order", encode_args((2,)), uuid.uuid4().hex)])
        assert isinstance(again, Created) and again.created  # and the engine goes on committing
    finally:
        store.close()
        cutter.close()


def test_a_commit_the_server_never_got_is_reported_failed(schema_url: str, postgres_url: str) -> None:
    store = open_store(schema_url)
    try:
        engine = uuid.uuid4().hex
        store.register_engine(engine, heartbeat=0.5, ttl=3.0)

        def end_session() -> None:
            pid = store.env.conn.info.backend_pid
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))

        store.before_commit = end_session
        (result,) = store.apply(engine, [CreateWorkflow("wf-never", "Order", encode_args((1,)), uuid.uuid4().hex)])
        store.before_commit = None
        assert isinstance(result, StorageError), result
        assert store.get_workflow("wf-never") is None
    finally:
        store.close()


def test_a_commit_still_in_progress_when_its_reply_was_lost_is_waited_out(schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server takes 3 s to finish the commit whose reply was lost: the batch's caller gets
    the real result (the start exists), not a failure after the first seconds of waiting. The
    store's bound is raised from 5 s to 20 s here: the release (polled from this process)
    and the commit's end come late on a loaded machine, and past the bound the answer is
    rightly ``OutcomeUnknown`` (the next test)."""
    monkeypatch.setattr(_outcome, "OUTCOME_WAIT", 20.0)
    cutter = CommitCutter(schema_url)
    store = open_store(cutter.url(schema_url))
    try:
        engine = uuid.uuid4().hex
        store.register_engine(engine, heartbeat=0.5, ttl=3.0)
        slow_commits(schema_url, "wf-slow")
        releaser = release_once_held(schema_url, 3.0)
        store.before_commit = cutter.armed.set
        (result,) = store.apply(engine, [CreateWorkflow("wf-slow", "Order", encode_args((1,)), uuid.uuid4().hex)])
        store.before_commit = None
        releaser.join(10.0)
        assert cutter.cut.is_set()
        assert isinstance(result, Created) and result.created, result
        assert store.get_workflow("wf-slow")["status"] == "running"
    finally:
        store.close()
        cutter.close()


def test_a_commit_in_progress_past_the_bound_is_outcome_unknown_and_nothing_reads_over_it(
    schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound the batch gets ``OutcomeUnknown``, never a "commit failed"; until the
    server ends that commit, reads of the store fail rather than show the state before it
    (a replay from there would redo what it carried); then everything it carried is there."""
    from weft_actors.errors import OutcomeUnknown

    monkeypatch.setattr(_outcome, "OUTCOME_WAIT", 1.0)
    cutter = CommitCutter(schema_url)
    store = open_store(cutter.url(schema_url))
    try:
        engine = uuid.uuid4().hex
        store.register_engine(engine, heartbeat=0.5, ttl=3.0)
        slow_commits(schema_url, "wf-held")
        store.before_commit = cutter.armed.set
        (result,) = store.apply(engine, [CreateWorkflow("wf-held", "Order", encode_args((1,)), uuid.uuid4().hex)])
        store.before_commit = None
        assert isinstance(result, OutcomeUnknown), result
        assert result.code == "outcome_unknown"
        with pytest.raises(StorageError, match="still in progress"):
            store.get_workflow("wf-held")
        release_commit(schema_url)
        deadline = time.monotonic() + 10.0
        while True:
            try:
                record = store.get_workflow("wf-held")
                break
            except StorageError:
                assert time.monotonic() < deadline, "the held commit never ended"
                time.sleep(0.02)
        assert record is not None and record["status"] == "running"
        (again,) = store.apply(engine, [CreateWorkflow("wf-next", "Order", encode_args((2,)), uuid.uuid4().hex)])
        assert isinstance(again, Created) and again.created, again
    finally:
        try:
            release_commit(schema_url)
        except psycopg.Error:
            pass
        store.close()
        cutter.close()
