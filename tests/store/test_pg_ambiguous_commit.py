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

import socket
import threading
import uuid
from typing import Any

import psycopg
import pytest

from weft_actors.codec import encode_args
from weft_actors.errors import StorageError
from weft_actors.store import Created, CreateWorkflow
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(60)


def open_store(url: str) -> Any:
    from weft_actors.store._pg import PgStore

    return PgStore(url, clock=FakeClock())


SYNC = b"S\x00\x00\x00\x04"
"""The protocol's Sync message, which ends each pipeline the client sends (a Flush may follow)."""
READY = b"Z\x00\x00\x00\x05I"
"""ReadyForQuery (idle): the server's last message once it has answered a pipeline."""


class CommitCutter:
    """A TCP proxy in front of the server that, once armed (just before a commit is sent),
    passes the client's next pipeline (its writes and ``COMMIT``, up to the Sync that ends it)
    on to the server and then closes the client's side at once: the server makes the commit,
    its reply is never read. Every other byte is passed both ways untouched."""

    def __init__(self, server_url: str) -> None:
        info = psycopg.conninfo.conninfo_to_dict(server_url)
        self.target = (str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        info = psycopg.conninfo.conninfo_to_dict(url)
        info.update(host="127.0.0.1", port=str(self.port))
        return psycopg.conninfo.make_conninfo(**info)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            cut = threading.Event()  # this connection's
            threading.Thread(target=self._pump, args=(client, server, cut, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, cut, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, cut: threading.Event, upstream: bool) -> None:
        try:
            while data := source.recv(65536):
                if not upstream and cut.is_set():
                    if data.endswith(READY):  # the server's answer to the commit: it is done
                        break
                    continue  # read, never passed on
                sink.sendall(data)
                if upstream and self.armed.is_set() and SYNC in data:
                    self.armed.clear()
                    cut.set()
                    self.cut.set()
                    source.shutdown(socket.SHUT_RDWR)  # the client's side: its reply is lost
                    source.close()
                    return  # the server's side is closed once its answer is read (no reset)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.close()
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


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
