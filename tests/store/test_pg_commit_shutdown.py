"""A session ended by the server (``AdminShutdown``, as a fast shutdown or
``pg_terminate_backend`` ends it) just after its ``COMMIT`` was made: the client reads the
error, but its connection is not yet seen as broken. The commit is in the store, so the
batch must report what the server committed, not "commit failed": a start reported failed
that landed is held by its engine with no actor, and nothing ever drives it.

The commit is held after it is made locally by a synchronous standby that never comes
(``synchronous_standby_names``); ending the session then leaves it committed, as the
server's warning says ("The transaction has already committed locally").
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from typing import Iterator

import psycopg
import pytest

from _postgres import PostgresServer, find_bindir
from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    """A dedicated server: this test changes a server-wide setting."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (initdb, pg_ctl)")
    with PostgresServer(bindir) as pg:
        yield pg


class LateHangUp:
    """A TCP proxy in front of the server that passes every byte at once but hangs up on the
    client only ``linger`` seconds after the server did: the client reads the server's last
    error (``AdminShutdown``) on a connection it does not yet see as broken, as a busy
    client does when it reads that message before the server's hang-up."""

    def __init__(self, server_url: str, linger: float = 1.0) -> None:
        info = psycopg.conninfo.conninfo_to_dict(server_url)
        self.target = (str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
        self.linger = linger
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = server_url.replace(f":{self.target[1]}/", f":{self.port}/")
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server, 0.0), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.linger), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, linger: float) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        time.sleep(linger)
        for end in (source, sink):
            try:
                end.close()
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


def _await_standby_setting(url: str, value: str) -> None:
    deadline = time.monotonic() + 10.0
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SHOW synchronous_standby_names").fetchone()
        if row is not None and row[0] == value:
            return
        assert time.monotonic() < deadline, "the server never took the new setting"
        time.sleep(0.02)


def _end_session_once_committed(url: str, stop: threading.Event) -> threading.Thread:
    """Terminate the session whose commit waits for the standby (made locally by then)."""

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            while not stop.is_set():
                row = admin.execute("SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' LIMIT 1").fetchone()
                if row is not None:
                    admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_commit_made_before_the_server_ended_the_session_is_reported_committed(server: PostgresServer) -> None:
    from weft_actors.store._pg import PgStore

    proxy = LateHangUp(server.url)
    store = PgStore(proxy.url, clock=FakeClock())
    stop = threading.Event()
    try:
        engine = uuid.uuid4().hex
        store.register_engine(engine, heartbeat=0.5, ttl=3.0)
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
            admin.execute("SELECT pg_reload_conf()")
        _await_standby_setting(server.url, "ghost")
        ender = _end_session_once_committed(server.url, stop)
        (result,) = store.apply(engine, [CreateWorkflow("wf-shutdown", "Order", encode_args((1,)), uuid.uuid4().hex)])
        ender.join(10.0)
        assert isinstance(result, Created) and result.created, result
        record = store.get_workflow("wf-shutdown")
        assert record is not None and record["status"] == "running"
    finally:
        stop.set()
        store.close()
        proxy.close()
