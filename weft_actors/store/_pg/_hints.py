"""Hints across hosts: one ``NOTIFY`` per committed transaction that gave a workflow a message
or an ending, heard by every engine on every host.

ZeroMQ carries hints between the shards of one supervisor; a supervisor on another host hears
nothing of them, and its engines would find a message only at their next feed poll (every
heartbeat). So the writer of a transaction that appended to an inbox or ended a workflow adds
a ``NOTIFY`` to it, naming those workflows: the server delivers it, in commit order, only if
the transaction commits. ``NOTIFY`` takes a lock of its own at commit; here every writer holds
the store's lock already, so it serialises nothing more, and it is sent at most once per
transaction. A hint only makes things sooner: without any, the poll still finds everything.

A batch's lines go in as many notifications as the server's payload limit needs, all sent
by one statement: a single "look at everything" (``*``) for a large batch would have every
other engine run a maintenance pass (a feed poll on its loop) for workflows it does not hold.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from typing import Any, Callable, Final

import psycopg

from .._keys import STATUS_NAMES, TERMINAL, split_visibility_key
from ._txn import DELETED, PgTxn

__all__ = ["CHANNEL", "hinted", "notify_payloads", "Listener"]

log = logging.getLogger("weft_actors.store")

CHANNEL: Final = "weft_actors_hints"
PAYLOAD_LIMIT: Final = 7000
"""Bytes of lines per notification: the server refuses a payload of 8000 bytes or more."""
EVERYTHING: Final = "*"
"""A payload that says only "look at everything" (sent by earlier versions for a large batch)."""

_TERMINAL_CODES: Final = frozenset(code for code, name in STATUS_NAMES.items() if name in TERMINAL)


def notify_payloads(txn: PgTxn, feed_db: str, visibility_db: str) -> list[str]:
    """What a transaction's buffered writes give to hint: ``m <wid>`` for each workflow whose
    inbox got a message (its feed entries), ``d <wid>`` for each that ended, in payloads of at
    most ``PAYLOAD_LIMIT`` bytes; none if nothing."""
    lines: list[str] = []
    feed = txn.overlay_values(feed_db)
    for value in feed:
        if value is not DELETED:
            lines.append("m " + bytes(value[8:]).decode(errors="replace"))
    for key, value in txn.overlay_items(visibility_db):
        if value is not DELETED and key and key[0] in _TERMINAL_CODES:
            lines.append("d " + split_visibility_key(key)[2])
    return _chunked(lines)


def _chunked(lines: list[str]) -> list[str]:
    """``lines`` joined into payloads of at most ``PAYLOAD_LIMIT`` bytes each, in order."""
    payloads: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in lines:
        length = len(line.encode()) + 1
        if chunk and size + length > PAYLOAD_LIMIT:
            payloads.append("\n".join(chunk))
            chunk, size = [], 0
        chunk.append(line)
        size += length
    if chunk:
        payloads.append("\n".join(chunk))
    return payloads


def hinted(payload: str) -> list[tuple[str | None, str]]:
    """``(workflow id, kind)`` of each hint in a payload; ``(None, ...)``: look at everything."""
    if payload == EVERYTHING or not payload:
        return [(None, "engine-dead")]
    found: list[tuple[str | None, str]] = []
    for line in payload.split("\n"):
        kind, _, wid = line.partition(" ")
        found.append((wid, "workflow-done" if kind == "d" else "workflow-touched"))
    return found


class Listener:
    """A thread with a connection of its own that ``LISTEN``s and calls ``on_hint(hints)``
    with the ``(wid, kind)`` pairs of each burst of notifications (from that thread: the callee
    hands them to its loop, once per burst)."""

    def __init__(self, url: str, on_hint: Callable[[list[tuple[str | None, str]]], None], own: Callable[[], set[int]]) -> None:
        self._url = url
        self._on_hint = on_hint
        self._own = own
        """The server pids of this store's own connections: their hints are its own doing."""
        self._stop = threading.Event()
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="weft-pg-hints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                log.warning("store: hints from other hosts paused (%s); the feed poll goes on", exc)
                self._stop.wait(1.0)
                if not self._stop.is_set():
                    self._on_hint([(None, "engine-dead")])  # whatever was missed: one look at everything

    def _listen(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            while not self._stop.is_set():
                ready, _, _ = select.select([conn.fileno(), self._wake_read.fileno()], [], [])
                if conn.fileno() not in ready:
                    continue
                own = self._own()
                hints: list[tuple[str | None, str]] = []
                for notify in conn.notifies(timeout=0, stop_after=1000):
                    if notify.pid not in own:
                        hints.extend(hinted(notify.payload))
                if hints:
                    self._on_hint(hints)

    def close(self) -> None:
        self._stop.set()
        self._wake_write.send(b"x")
        self._thread.join(5.0)
        self._wake_read.close()
        self._wake_write.close()
