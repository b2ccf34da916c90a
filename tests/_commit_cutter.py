"""A real TCP proxy that loses the reply of a PostgreSQL ``COMMIT``, and a commit the server
holds "in progress": a connection lost during ``COMMIT`` leaves its outcome unknown to the
client while the server may still make it (``store._pg._outcome``)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse

import psycopg

SYNC = b"S\x00\x00\x00\x04"
"""The protocol's Sync message, which ends each pipeline the client sends (a Flush may follow)."""
READY = b"Z\x00\x00\x00\x05I"
"""ReadyForQuery (idle): the server's last message once it has answered a pipeline."""


class CommitCutter:
    """A TCP proxy in front of the server that, once armed (just before a commit is sent),
    passes the client's next pipeline (its writes and ``COMMIT``, up to the Sync that ends it)
    on to the server and then closes the client's side at once: the server makes the commit,
    its reply is never read. Every other byte is passed both ways untouched.

    ``cut_held_commit(url)`` cuts instead the client's side of the connection whose commit the
    server holds in ``slow_commits``' trigger, once it is held: for a store whose other
    connections (an engine's reads, other processes) keep talking meanwhile, whatever the
    statements look like on the wire (prepared ones do not show their text)."""

    def __init__(self, server_url: str) -> None:
        info = psycopg.conninfo.conninfo_to_dict(server_url)
        self.target = (str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.cut = threading.Event()
        self._closed = threading.Event()
        self._links: dict[int, tuple[socket.socket, threading.Event]] = {}
        """The server side's local port (the server's ``client_port``) -> the client's socket
        and the connection's cut flag."""
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` through this proxy, in the same form (a ``postgresql://`` URL stays one)."""
        if url.startswith(("postgresql://", "postgres://")):
            parts = urllib.parse.urlsplit(url)
            login = parts.netloc.rpartition("@")[0]
            netloc = f"{login}@127.0.0.1:{self.port}" if login else f"127.0.0.1:{self.port}"
            return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        info = psycopg.conninfo.conninfo_to_dict(url)
        info.update(host="127.0.0.1", port=str(self.port))
        return psycopg.conninfo.make_conninfo(**info)

    def cut_held_commit(self, url: str) -> threading.Thread:
        """From a thread: once the server holds a commit in ``slow_commits``' trigger, cut the
        client's side of that commit's connection (its reply is lost; the server goes on)."""

        def run() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                while not self._closed.is_set():
                    row = conn.execute(
                        "SELECT client_port FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
                    ).fetchone()
                    link = None if row is None else self._links.get(int(row[0]))
                    if link is not None:
                        client, cut = link
                        cut.set()
                        self.cut.set()
                        client.shutdown(socket.SHUT_RDWR)
                        return
                    time.sleep(0.01)

        thread = threading.Thread(target=run, name="cut-held-commit", daemon=True)
        thread.start()
        return thread

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            cut = threading.Event()  # this connection's
            self._links[server.getsockname()[1]] = (client, cut)
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
                    break
        except OSError:
            pass
        ends = (source,) if upstream and cut.is_set() else (source, sink)
        for end in ends:  # once cut, the server's side is closed once its answer is read (no reset)
            try:
                end.close()
            except OSError:
                pass

    def close(self) -> None:
        self._closed.set()
        self.listener.close()


def slow_commits(url: str, wid: str) -> None:
    """Make the commit of a transaction that inserts workflow ``wid`` stay in progress on the
    server until a row is in ``hold_commit``: a deferred constraint trigger runs inside
    ``COMMIT``, as a slow WAL flush or a synchronous standby would hold it there. A row with
    ``go`` lets the commit be made; one without makes it fail (``release_commit``)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE hold_commit (go boolean)")
        conn.execute(
            "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "WHILE NOT EXISTS (SELECT 1 FROM hold_commit) LOOP PERFORM pg_sleep(0.02); END LOOP; "
            "IF NOT EXISTS (SELECT 1 FROM hold_commit WHERE go) THEN RAISE EXCEPTION 'the held commit is refused'; END IF; "
            "RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON weft_workflows DEFERRABLE INITIALLY DEFERRED "
            f"FOR EACH ROW WHEN (NEW.k = '\\x{wid.encode().hex()}'::bytea) EXECUTE FUNCTION hold_commit()"
        )


def held_for(url: str) -> float:
    """How long the server has been in the held commit (0.0 if it is in none)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT max(extract(epoch FROM clock_timestamp() - query_start)) FROM pg_stat_activity "
            "WHERE wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
        ).fetchone()
    return 0.0 if row is None or row[0] is None else float(row[0])


def release_commit(url: str, go: bool = True) -> None:
    """Let the held commit end: made (``go``), or failed, aborting its transaction."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO hold_commit VALUES (%s)", (go,))


def release_once_held(url: str, seconds: float, go: bool = True) -> threading.Thread:
    """Release the held commit (``release_commit``) once the server has been in it for ``seconds``."""

    def run() -> None:
        deadline = time.monotonic() + 30.0
        while held_for(url) < seconds and time.monotonic() < deadline:
            time.sleep(0.02)
        release_commit(url, go)

    thread = threading.Thread(target=run, name="release-commit", daemon=True)
    thread.start()
    return thread


def tidy(url: str, cutter: CommitCutter) -> None:
    """At a test's end: let a commit still held end (a test that failed midway left it), then
    close the proxy."""
    try:
        release_commit(url)
    except psycopg.Error:
        pass
    cutter.close()
