"""The console's HTTP/1.1 transport: h11 on an asyncio loop in one thread of the supervisor,
with a bounded pool of worker threads for the requests.

The console used to be a ``ThreadingHTTPServer``: one thread per connection and no timeout,
so a few hundred idle or keep-alive connections (each holding a thread, and a ZeroMQ socket
once it had read anything) filled the supervisor's file table and took the front door down
with it. Here every connection costs one socket and a coroutine; at most
``max_connections`` are open (a new one first displaces the longest idle keep-alive
connection, then is answered 503 with a WARNING); each must send its whole next request
within ``timeout`` seconds or is closed; and the requests run on ``workers`` threads, so the
console's ZeroMQ sockets (one per thread that calls the front door) are bounded by
``workers`` too. h11 does the parsing and framing (keep-alive, chunked bodies, pipelining);
TLS is the standard library's ``ssl``, started on each connection only after it was counted.

The seam: ``handle(Request) -> Response`` runs on a worker; ``quick(Request)`` runs first on
the loop itself and may answer at once (refusals, the login page) without a worker, or hand
back a function to run on a thread of its own beside the workers (``/healthz``, which reads
the store): those answer even while every worker waits on the front door.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import socket
import ssl
import threading
import time
from http import HTTPStatus
from typing import Callable, NoReturn, Union

import h11

__all__ = ["HttpLimits", "Request", "Response", "HttpServer", "Quick"]

log = logging.getLogger("weft_actors.console")

_WARN_EVERY = 10.0
"""Seconds between two WARNINGs about refused connections (each says how many since)."""


@dataclasses.dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int = 64
    """Connections open at once; more are refused with 503."""
    timeout: float = 10.0
    """Seconds a connection gets to send its whole next request (head and body); one idle
    that long between requests is closed."""
    workers: int = 4
    """Threads that run requests (and so the console's ZeroMQ sockets to the front door)."""
    max_body: int = 4 << 20
    """Bytes a request body may carry; more is refused with 413."""


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    """The path and query as sent."""
    headers: dict[str, str]
    """Lower-case names; a repeated header keeps its last value."""
    body: bytes
    peer: str


@dataclasses.dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def _raw(status: int, reason: str, message: str | None = None) -> bytes:
    """A whole response written without h11: the refusals sent before a request is whole."""
    text = f"{message or reason}\n"
    return f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(text)}\r\nConnection: close\r\n\r\n{text}".encode()


def _close_if_cancelled(sock: socket.socket, task: asyncio.Task[None]) -> None:
    """A connection displaced before its task ran never reached its own ``finally``."""
    if task.cancelled():
        sock.close()


async def _discard(reader: asyncio.StreamReader) -> None:
    while await reader.read(1 << 16):
        pass


Quick = Callable[[Request], Union[Response, Callable[[], Response], None]]
"""What ``quick`` may give: an answer now, a function that answers on the side thread, or
``None`` (then ``handle`` answers on a worker)."""


class _Closed(Exception):
    """The connection ends: the peer left, timed out or sent something unusable (already
    answered when it could be)."""


class HttpServer:
    """Serves ``handle`` on ``host:port`` (TLS with ``tls``) until ``stop()``; binds in the
    constructor, so a port in use fails the caller at once."""

    def __init__(
        self,
        host: str,
        port: int,
        handle: Callable[[Request], Response],
        quick: Quick,
        *,
        limits: HttpLimits = HttpLimits(),
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._handle, self._quick, self.limits, self._tls = handle, quick, limits, tls
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=128, reuse_port=False)
        self.port: int = self._socket.getsockname()[1]
        self._pool = concurrent.futures.ThreadPoolExecutor(limits.workers, thread_name_prefix="weft-console")
        self._side = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="weft-console-side")
        self._loop = asyncio.new_event_loop()
        self._open: dict[asyncio.Task[None], bool] = {}
        """Each open connection's task, and whether it waits for a request (idle); the idle
        ones in the order they became so, longest idle first."""
        self._refused = 0
        self._warned_at = -_WARN_EVERY
        self._thread = threading.Thread(target=self._run, name="weft-console", daemon=True)

    def start(self) -> None:
        ready = threading.Event()
        self._loop.call_soon(ready.set)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        """Stop accepting, close every connection, and let the workers finish on their own
        (a request waiting on the front door ends with the console's client)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._side.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._socket.setblocking(False)
        accepting = self._loop.create_task(self._accept())
        try:
            self._loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()  # every connection closes; a request on a worker is not waited for
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _accept(self) -> None:
        """Accept, and count each connection before anything (a TLS handshake too) is read
        from it: a connection over the bound costs its socket for a moment, no more."""
        while True:
            try:
                sock, _ = await self._loop.sock_accept(self._socket)
            except OSError as exc:  # e.g. EMFILE: the process's file table is full
                now = time.monotonic()
                if now - self._warned_at >= _WARN_EVERY:
                    log.warning("console: cannot accept a connection: %s", exc)
                    self._warned_at = now
                await asyncio.sleep(0.1)
                continue
            if len(self._open) >= self.limits.max_connections and not self._displace_idle():
                self._refuse(sock)
                continue
            task = self._loop.create_task(self._connection(sock))
            task.add_done_callback(functools.partial(_close_if_cancelled, sock))
            self._open[task] = True

    def _refuse(self, sock: socket.socket) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            log.warning(
                "console: %d connections open, its bound (--http-max-connections): refused %d connection(s) with 503 since the last warning",
                len(self._open), self._refused,
            )
            self._warned_at, self._refused = now, 0
        try:
            if self._tls is None:
                sock.send(_raw(503, "Service Unavailable", "the console is busy: too many connections (--http-max-connections)"))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        # Closed a moment later, so that the client reads the 503 before any reset.
        self._loop.call_later(0.5, sock.close)

    def _busy(self, busy: bool) -> None:
        """Mark this connection busy, or idle (the newest idle: displaced last). A displaced
        one ends here even if its cancellation was lost (``wait_for`` can drop one that
        lands as the awaited read completes): it is no longer counted."""
        task = asyncio.current_task()
        if task not in self._open:
            raise _Closed
        del self._open[task]
        self._open[task] = not busy

    def _displace_idle(self) -> bool:
        """Close the longest idle keep-alive connection to make room; False if none is idle."""
        for task, idle in self._open.items():
            if idle:
                del self._open[task]
                task.cancel()
                return True
        return False

    # -- one connection ----------------------------------------------------------------

    async def _connection(self, sock: socket.socket) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            reader = asyncio.StreamReader(limit=1 << 16, loop=self._loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=self._loop)
            connecting = self._loop.connect_accepted_socket(lambda: protocol, sock, ssl=self._tls, ssl_handshake_timeout=self.limits.timeout if self._tls else None)
            transport, _ = await asyncio.wait_for(connecting, self.limits.timeout)
            writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
            peer = writer.get_extra_info("peername")
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
            while True:
                request = await self._read_request(conn, reader, writer, str(peer[0]) if peer else "")
                quick = self._quick(request)
                if isinstance(quick, Response):
                    response = quick
                elif quick is not None:
                    response = await self._loop.run_in_executor(self._side, quick)
                else:
                    response = await self._loop.run_in_executor(self._pool, self._handle, request)
                await self._send(conn, writer, response, request.method == "HEAD")
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except (_Closed, OSError, asyncio.TimeoutError, h11.LocalProtocolError):
            pass
        except Exception:  # noqa: BLE001 - one connection's bug must not end the server
            log.exception("console: a connection failed")
        finally:
            self._open.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            if writer is None:
                sock.close()
            else:
                writer.close()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> Request:
        """The next whole request, within ``timeout`` of this call; an idle connection is
        closed silently, a late or malformed request is answered (408, 400, 413) and closed."""
        deadline = self._loop.time() + self.limits.timeout
        self._busy(False)
        head = await self._next(conn, reader, writer, deadline)
        self._busy(True)
        if not isinstance(head, h11.Request):
            raise _Closed
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in head.headers}
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.limits.max_body:
            await self._fail(reader, writer, 413)
        body = bytearray()
        while True:
            event = await self._next(conn, reader, writer, deadline)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.limits.max_body:
                    await self._fail(reader, writer, 413)
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise _Closed
        return Request(head.method.decode("latin-1"), head.target.decode("latin-1"), headers, bytes(body), peer)

    async def _next(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float) -> object:
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                await self._fail(reader, writer, exc.error_status_hint)
            if event is h11.NEED_DATA:
                remaining = deadline - self._loop.time()
                try:
                    if remaining <= 0:
                        raise asyncio.TimeoutError
                    data = await asyncio.wait_for(reader.read(1 << 16), remaining)
                except asyncio.TimeoutError:
                    if conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                        raise _Closed from None  # idle: closed without a word, as any server
                    await self._fail(reader, writer, 408)
                if data:
                    self._busy(True)  # a request under way is never displaced
                conn.receive_data(data)
                continue
            if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                raise _Closed
            return event

    async def _fail(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int) -> NoReturn:
        """Answer ``status`` and end the connection, reading what the client still sends for
        a moment first: closing on unread data resets the connection, and the client would
        lose the answer."""
        try:
            writer.write(_raw(status, HTTPStatus(status).phrase))
            await asyncio.wait_for(writer.drain(), 1.0)
            if writer.can_write_eof():
                writer.write_eof()
            await asyncio.wait_for(_discard(reader), 1.0)
        except (OSError, asyncio.TimeoutError):
            pass
        raise _Closed

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, response: Response, head_only: bool) -> None:
        headers = [*response.headers, ("Content-Length", str(len(response.body)))]
        events: list[h11.Event] = [h11.Response(status_code=response.status, headers=headers, reason=HTTPStatus(response.status).phrase)]
        if response.body and not head_only:
            events.append(h11.Data(data=response.body))
        events.append(h11.EndOfMessage())
        writer.write(b"".join(conn.send(event) or b"" for event in events))
        await asyncio.wait_for(writer.drain(), self.limits.timeout)
