"""The front door's way back to clients: REQ envelopes, and replies held for slow readers.

A client's replies queue in zmq up to the front door's high-water mark, then here up to
``budget`` bytes, and beyond that are dropped: a client that never reads cannot grow the
supervisor. A client with replies held here gets every later one behind them, so its
replies never overtake each other.

A client that speaks batches (``_wire``: it sent envelopes) has the replies of one front door
turn gathered (``send``) and sent as one message at the turn's end (``flush``); the bounds
then count that message as they count a single reply.
"""

from __future__ import annotations

import collections
import logging

import zmq

from ._frames import send_frames
from ._wire import reply_batch

__all__ = ["ClientReplies"]

log = logging.getLogger("weft_actors.bus")

REPLY_BATCH_BYTES = 256 << 10
"""Replies gathered (for all clients) before they leave without waiting for the turn's end."""
MAX_BATCHING_CLIENTS = 1 << 16


class ClientReplies:
    """Sends replies on the front door's client socket (``frontend``, set once the socket
    exists, in the front door's thread); used only from that thread, except ``held_bytes``
    and ``dropped``, plain numbers another thread may read a moment stale."""

    __slots__ = ("frontend", "budget", "dropped", "_enveloped", "_held", "_held_bytes", "batching", "gathered", "_gathered_bytes")

    frontend: zmq.Socket

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.dropped = 0
        self._enveloped: dict[bytes, int] = {}
        """REQ clients -> their requests awaiting a reply, which must carry the delimiter."""
        self._held: dict[bytes, collections.deque[list[bytes]]] = {}
        """Clients whose zmq queue was full -> their replies waiting here, in order."""
        self._held_bytes: dict[bytes, int] = {}
        self.batching: set[bytes] = set()
        """Clients that speak batches (``speaks_batches``)."""
        self.gathered: dict[bytes, list[bytes]] = {}
        """Such clients -> their replies of this turn, not sent yet (``flush``)."""
        self._gathered_bytes = 0

    def speaks_batches(self, client: bytes) -> None:
        """``client`` sent an envelope: its replies may go in batches. Forgetting clients is
        always safe (their replies then go one by one), so the set is bounded by clearing."""
        batching = self.batching
        if client not in batching:
            if len(batching) >= MAX_BATCHING_CLIENTS:
                batching.clear()
            batching.add(client)

    def holding(self) -> bool:
        """Whether replies wait here for a slow client (the loop then polls sooner)."""
        return bool(self._held)

    def held_bytes(self) -> int:
        return sum(self._held_bytes.values())

    def enveloped(self, client: bytes) -> None:
        """``client`` sent a request in a REQ envelope: its reply goes back in one."""
        self._enveloped[client] = self._enveloped.get(client, 0) + 1

    def send(self, client: bytes, reply: bytes) -> None:
        """Send ``reply`` to ``client`` now, or hold it (behind those already held); for a
        client that speaks batches, gather it for this turn's ``flush``."""
        enveloped = self._enveloped
        if client in self.batching and not (enveloped and client in enveloped):
            gathered = self.gathered.get(client)
            if gathered is None:
                self.gathered[client] = [reply]
            else:
                gathered.append(reply)
            self._gathered_bytes += len(reply)
            if self._gathered_bytes >= REPLY_BATCH_BYTES:
                self.flush()
            return
        if enveloped and client in enveloped:
            if enveloped[client] == 1:
                del enveloped[client]
            else:
                enveloped[client] -= 1
            parts = [client, b"", reply]
        else:
            parts = [client, reply]
        self._deliver(client, parts)

    def flush(self) -> None:
        """Send each batching client the replies gathered for it, as one message."""
        gathered, self.gathered = self.gathered, {}
        self._gathered_bytes = 0
        for client, replies in gathered.items():
            self._deliver(client, [client, replies[0] if len(replies) == 1 else reply_batch(replies)])

    def _deliver(self, client: bytes, parts: list[bytes]) -> None:
        if self._held and client in self._held:  # behind the replies it has not taken yet
            self._hold(client, parts)
            return
        try:
            send_frames(self.frontend, parts)
        except zmq.Again:  # its zmq queue is full: it reads slower than it asks
            self._hold(client, parts)
        except zmq.ZMQError:
            log.debug("client went away before its reply")

    def _hold(self, client: bytes, parts: list[bytes]) -> None:
        size = len(parts[-1])
        used = self._held_bytes.get(client, 0)
        if used + size > self.budget:
            self.dropped += 1
            if self.dropped & (self.dropped - 1) == 0:  # 1st, 2nd, 4th, ...: a bounded log
                log.warning("front door: dropped a reply to a client that does not read its replies (%d so far)", self.dropped)
            return
        self._held_bytes[client] = used + size
        self._held.setdefault(client, collections.deque()).append(parts)

    def send_held(self) -> None:
        """Send what waits for slow clients, as far as their zmq queues take it."""
        for client in list(self._held):
            queue_ = self._held[client]
            try:
                while queue_:
                    send_frames(self.frontend, queue_[0])
                    self._held_bytes[client] -= len(queue_.popleft()[-1])
            except zmq.Again:
                continue
            except zmq.ZMQError:  # gone: what it had waiting is dropped
                self.dropped += len(queue_)
            del self._held[client]
            del self._held_bytes[client]
