"""A bound on what clients can make libzmq hold before the front door sees a message.

ZMTP delivers a multi-part message whole: libzmq keeps every part it has received until the
last one arrives, and ``MAXMSGSIZE`` limits each part, not their number. So one client
sending a message of thousands of large parts could grow the supervisor until the kernel
kills it, and nothing the front door does after receiving can prevent that.

``IntakeGuard`` bounds it from outside libzmq. It follows the client socket's connections
(a zmq monitor reports each accepted one with its file descriptor) and, a few times a second,
the process's anonymous memory. When that has grown more than ``budget`` bytes above where it
started, and is still growing, the connection that received the most bytes since the last
look (the kernel counts them: ``TCP_INFO``) is shut down. libzmq then drops that peer and its
unfinished message, and the memory comes back. Other clients are not touched (over ``ipc://``
there are no per-connection counts, and every connection is cut). Peers reconnect by
themselves; what the cut one had in flight is unanswered, as after any lost connection.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from typing import Final

import zmq
from zmq.utils.monitor import recv_monitor_message

__all__ = ["IntakeGuard", "anonymous_memory", "part_cap", "DEFAULT_INTAKE_BUDGET"]

log = logging.getLogger("weft_actors.bus")

DEFAULT_INTAKE_BUDGET: Final = 512 << 20
CHECK_INTERVAL: Final = 0.05
"""Seconds between looks: at loopback speed a peer adds a few hundred MiB at most meanwhile."""

_TCP_INFO_SIZE: Final = 232
_BYTES_RECEIVED_OFFSET: Final = 128
"""``tcpi_bytes_received`` in Linux's ``struct tcp_info`` (since 4.1)."""


def part_cap(max_frame: int) -> int:
    """``MAXMSGSIZE`` for the client socket: twice the largest legal request (``max_frame``,
    the payload limit plus the request's envelope). libzmq reads each part's size before it
    allocates anything for it and drops the connection of a part above this, so no single
    part grows the supervisor by more (many smaller parts are ``IntakeGuard``'s). Twice, not
    once: a request somewhat over the payload limit still arrives and is answered
    ``PayloadTooLarge``, since a client does not know the server's limit."""
    return 2 * max_frame


def anonymous_memory() -> int | None:
    """This process's anonymous resident memory (``RssAnon``; not the store's mapped file),
    or None where /proc does not say."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _bytes_received(fd: int) -> int | None:
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except OSError:
        return None
    if len(info) < _BYTES_RECEIVED_OFFSET + 8:
        return None
    return struct.unpack_from("Q", info, _BYTES_RECEIVED_OFFSET)[0]


def _cut(fd: int) -> None:
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)  # the connection, not just our duplicate descriptor
    except OSError:
        pass  # gone already


class IntakeGuard:
    """Owned by the front door's thread: ``monitor`` goes into its poller (``on_events`` when
    readable), ``check()`` runs every loop turn (it looks every ``CHECK_INTERVAL`` at most)."""

    def __init__(self, frontend: zmq.Socket, budget: int = DEFAULT_INTAKE_BUDGET) -> None:
        self.budget = budget
        self.cuts = 0
        self._connections: set[int] = set()
        self._sample: dict[int, int | None] | None = None
        """Bytes each connection had received at the previous look, taken only while over."""
        self._baseline = anonymous_memory()
        self._last = self._baseline or 0
        self._next_check = 0.0
        self.monitor = frontend.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)

    def close(self) -> None:
        self.monitor.close(0)

    def on_events(self) -> None:
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._connections.add(event["value"])
            else:
                self._connections.discard(event["value"])

    def check(self) -> None:
        """Cheap while under budget (one read of /proc): connections are counted only past it,
        at two looks in a row, so the one receiving the most between them is cut."""
        now = time.monotonic()
        if now < self._next_check or self._baseline is None:
            return
        self._next_check = now + CHECK_INTERVAL
        used = anonymous_memory()
        if used is None:
            return
        grew, self._last = used > self._last, used
        if not grew or used - self._baseline <= self.budget or not self._connections:
            self._sample = None
            return
        counts = {fd: _bytes_received(fd) for fd in self._connections}
        previous, self._sample = self._sample, counts
        if previous is None:
            return  # the next look, CHECK_INTERVAL later, tells who is sending
        deltas = {fd: count - (previous.get(fd) or 0) for fd, count in counts.items() if count is not None}
        victims = [max(deltas, key=deltas.__getitem__)] if deltas else sorted(self._connections)
        for fd in victims:
            _cut(fd)
            self._connections.discard(fd)
        self._sample = None
        self.cuts += len(victims)
        log.warning(
            "front door: memory %d MiB above its start (budget %d MiB) while a client sends a message "
            "it has not finished; cut %d connection(s) (%d so far)",
            (used - self._baseline) >> 20, self.budget >> 20, len(victims), self.cuts,
        )
