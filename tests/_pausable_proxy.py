"""A TCP proxy on loopback that can stop forwarding: a network cut between a client and its
server, as the client sees it. Paused, it keeps every connection open and acknowledges what
arrives (the kernel does) but passes nothing on, either way, until resumed -- so neither TCP
keepalives nor retransmission timeouts end a wait; only the client's own bound does."""

from __future__ import annotations

import socket
import threading
from typing import Any

__all__ = ["PausableProxy"]


class PausableProxy:
    """Use as a context manager; ``port`` is where to connect instead of ``target``."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._open = threading.Event()
        self._open.set()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target, timeout=5)
                server.settimeout(None)
                # As the client and server set on their own sockets (libpq does): without it,
                # Nagle holds each small write of a pipeline until the peer's delayed ACK,
                # ~40 ms a hop, and every round trip through the proxy costs tens of ms.
                for sock in (client, server):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
                for src, dst in ((client, server), (server, client)):
                    thread = threading.Thread(target=self._pump, args=(src, dst), daemon=True)
                    self._threads.append(thread)
                    thread.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                while not self._open.wait(0.05):
                    if self._closed:
                        return
                if not data or self._closed:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> PausableProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
