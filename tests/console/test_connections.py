"""The console's connections are bounded against a real supervisor over real sockets: idle
and keep-alive connections cannot fill the supervisor's file table (excess refused with 503
and a WARNING), a slow or idle connection is closed after --http-timeout, and the ZeroMQ front
door and /healthz keep answering whatever the console's load."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from _console import TOKEN, console_supervisor, request
from _processes import wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)

MAX = 8
"""--http-max-connections in the tests that set it."""


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _fd_kinds(pid: int) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            kind = os.readlink(f"/proc/{pid}/fd/{name}").split(":")[0]
        except OSError:
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def _get(sock: socket.socket, path: str, port: int) -> bytes:
    """One keep-alive GET on ``sock``: the status line and headers of its answer (or what
    came before the server closed it)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


@pytest.fixture
def served(tmp_path: Path):
    sup, base = console_supervisor(tmp_path, shards=1, args=("--http-max-connections", str(MAX), "--http-timeout", "1.5"))
    with sup:
        yield sup, base, int(base.rsplit(":", 1)[1])


def test_idle_and_keep_alive_connections_cannot_fill_the_file_table(tmp_path):
    """With the default bound (64): e77e5be held a thread and about 4 descriptors for each."""
    sup, base = console_supervisor(tmp_path, shards=1)
    with sup:
        port = int(base.rsplit(":", 1)[1])
        pid = sup.process.pid
        assert request(f"{base}/api/overview")[0] == 200  # the console's worker threads and sockets exist
        before = _fds(pid)
        held: list[socket.socket] = []
        try:
            answers = []
            for _ in range(80):  # keep-alive connections that each made one GET and stay open
                sock = _connect(port)
                held.append(sock)
                answers.append(_get(sock, "/api/overview", port).split(b" ")[1])
            held += [_connect(port) for _ in range(150)]  # and connections that never send a byte
            # Each was served (a new one displaces the longest idle) and the file table holds
            # the bound (64 connections and the worker threads' ZeroMQ sockets), not the 230.
            assert answers == [b"200"] * 80, answers
            # 64 connections, and up to 4 worker threads' ZeroMQ sockets (one may exist before).
            bound = before + 64 + 4 * 5
            try:
                wait_until(lambda: _fds(pid) <= bound, timeout=5)
            except AssertionError:
                raise AssertionError(f"more than {bound} descriptors (had {before}, now {_fd_kinds(pid)})") from None
            with Client(sup.endpoint, timeout=5) as client:
                assert client.ping() and client.stats()["ready"] is True
            status, _, body = request(f"{base}/healthz", timeout=5)
            assert status == 200 and b'"ready": true' in body
        finally:
            for sock in held:
                sock.close()


def test_over_the_bound_a_connection_gets_503_and_a_warning_and_the_front_door_keeps_serving(served):
    sup, base, port = served
    held = [_connect(port) for _ in range(MAX)]
    try:
        for sock in held:  # in the middle of a request: not displaced, as idle ones are
            sock.sendall(f"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        time.sleep(0.2)  # let the server read what they sent
        late = _connect(port)
        held.append(late)
        late.settimeout(5)
        got = late.recv(200)
        assert got.startswith(b"HTTP/1.1 503"), (got, sup.log_text()[-2000:])
        wait_until(lambda: "refused" in sup.log_text() and "--http-max-connections" in sup.log_text(), timeout=10, what="a WARNING")
        assert "WARNING weft_actors.console" in sup.log_text()
        with Client(sup.endpoint, timeout=5) as client:
            assert client.ping() and client.stats()["ready"] is True
        # Once they time out (--http-timeout 1.5), the console answers again.
        wait_until(lambda: request(f"{base}/healthz", timeout=5)[0] == 200, timeout=10, what="/healthz again")
    finally:
        for sock in held:
            sock.close()


def test_idle_and_slow_connections_are_closed_after_the_timeout(served):
    sup, base, port = served
    idle, slow, kept = _connect(port), _connect(port), _connect(port)
    try:
        assert _get(kept, "/healthz", port).startswith(b"HTTP/1.1 200")
        slow.sendall(f"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # never finished
        started = time.monotonic()
        assert _closed_by_server(idle, 5) and _closed_by_server(kept, 5)
        slow.settimeout(5)
        assert slow.recv(100).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - started < 4
    finally:
        for sock in (idle, slow, kept):
            sock.close()


def test_bodies_and_heads_over_the_limits_are_refused(served):
    sup, base, port = served
    sock = _connect(port)
    try:
        sock.sendall(f"POST /api/workflows/x/signal HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Weft-Token: {TOKEN}\r\nContent-Length: {5 << 20}\r\n\r\n".encode() + b"x" * 1000)
        sock.settimeout(5)
        assert sock.recv(100).startswith(b"HTTP/1.1 413")
    finally:
        sock.close()
    sock = _connect(port)
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 300_000 + b"\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(100).startswith(b"HTTP/1.1 431")
    finally:
        sock.close()
    assert request(f"{base}/healthz")[0] == 200
