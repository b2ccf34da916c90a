"""Who may do what at the front door: CURVE client keys in a full-access and a read-only set.

The ZAP handler admits a connection whose key is in either set, and the front door checks
each request against the sets as they are *now*: a key removed from a directory loses its
access on its next request, even on a connection authenticated before (CURVE authenticates a
connection once, at its handshake). The sets are reloaded on ``reload()`` (the supervisor's
SIGHUP) and whenever a directory's modification time changes (``poll()``, at most once a
second from the front door's loop).
"""

from __future__ import annotations

import glob
import logging
import os
import threading
import time
from typing import Final, Iterator

import zmq
import zmq.auth
import zmq.backend

from ..errors import PermissionDenied

__all__ = ["KeyRing", "READ_OPS", "drain_with_users"]

log = logging.getLogger("weft_actors.bus")

READ_OPS: Final = frozenset({"result", "query", "describe", "list", "stats", "ping", "directory"})
"""The calls a read-only key may make: they change nothing."""

POLL_INTERVAL: Final = 1.0

_recv = getattr(zmq.backend.Socket, "recv", zmq.Socket.recv)
_NOBLOCK = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)


def _load_dir(directory: str) -> frozenset[bytes]:
    """The z85 public keys of the ``*.key`` certificate files in ``directory``."""
    keys = set()
    for path in sorted(glob.glob(os.path.join(directory, "*.key"))):
        try:
            public, _ = zmq.auth.load_certificate(path)
        except Exception as exc:  # one unreadable file must not lock everybody out
            log.warning("ignoring CURVE key file %s: %s", path, exc)
            continue
        keys.add(bytes(public))
    return frozenset(keys)


def _mtime(directory: str | None) -> float | None:
    if directory is None:
        return None
    try:
        return os.stat(directory).st_mtime_ns
    except OSError:
        return None


class KeyRing:
    """The authorised client keys: ``full`` may call anything, ``readonly`` only ``READ_OPS``.

    Thread-safe: the ZAP thread and the front door read it while the supervisor's thread
    reloads it (each set is replaced whole, never changed in place).
    """

    def __init__(self, full_dir: str, readonly_dir: str | None = None) -> None:
        self.full_dir = full_dir
        self.readonly_dir = readonly_dir
        self.full: frozenset[bytes] = frozenset()
        self.readonly: frozenset[bytes] = frozenset()
        self._lock = threading.Lock()
        self._admitted: frozenset[bytes] = frozenset()
        """Full-access keys admitted in memory (``admit``), kept through every reload."""
        self._stamps: tuple[float | None, float | None] = (None, None)
        self._next_poll = 0.0
        self.reload()

    def reload(self) -> None:
        """Read both directories again (a key in both counts as full access)."""
        with self._lock:
            stamps = (_mtime(self.full_dir), _mtime(self.readonly_dir))
            full = _load_dir(self.full_dir) | self._admitted
            readonly = _load_dir(self.readonly_dir) - full if self.readonly_dir else frozenset()
            changed = (full, readonly) != (self.full, self.readonly)
            self.full, self.readonly, self._stamps = full, readonly, stamps
        if changed:
            log.info("CURVE keys loaded: %d full access, %d read-only", len(full), len(readonly))

    def admit(self, public_key: bytes) -> None:
        """Give the z85 ``public_key`` full access for this process's life, whatever the
        directories hold: the supervisor's own clients (the web console) use an ephemeral key
        pair that is never written to disk."""
        with self._lock:
            self._admitted = self._admitted | {bytes(public_key)}
            self.full = self.full | self._admitted
            self.readonly = self.readonly - self._admitted

    def poll(self) -> None:
        """Reload if a directory changed; cheap to call often (two ``stat`` a second)."""
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + POLL_INTERVAL
        if (_mtime(self.full_dir), _mtime(self.readonly_dir)) != self._stamps:
            self.reload()

    def callback(self, domain: str, key: bytes) -> bool:
        """The ZAP credentials check (pyzmq's ``configure_curve_callback``): admit a
        connection whose z85 key is in either set."""
        return key in self.full or key in self.readonly

    def denied(self, user_id: bytes | str | None, op: str) -> PermissionDenied | None:
        """Why the client whose ZAP user id (its z85 key) is ``user_id`` may not call ``op``
        now, or ``None`` when it may."""
        key = user_id.encode() if isinstance(user_id, str) else user_id
        if key in self.full:
            return None
        if key in self.readonly:
            if op in READ_OPS:
                return None
            return PermissionDenied(f"this client key is read-only: {op} is not allowed", op=op)
        return PermissionDenied("this client key is no longer authorised", op=op)


def drain_with_users(sock: zmq.Socket, limit: int = 10_000, max_parts: int = 0) -> Iterator[tuple[list[bytes], str | None]]:
    """As ``_frames.drain``, with each message's ZAP ``User-Id`` (the client's z85 key under
    CURVE; ``None`` when the message carries none). Costs a zero-copy frame per part, so only
    a front door that checks permissions drains this way. ``max_parts``: as
    ``_frames.recv_frames`` (the parts beyond it are dropped, one empty part says so)."""
    for _ in range(limit):
        cut = False
        try:
            parts = [_recv(sock, _NOBLOCK, False)]
            while sock.getsockopt(_RCVMORE):
                part = _recv(sock, _NOBLOCK, False)
                if max_parts and len(parts) >= max_parts:
                    cut = True  # dropped at once: never more than max_parts held
                else:
                    parts.append(part)
        except zmq.Again:
            return
        try:
            found = parts[-1].get("User-Id")
        except zmq.ZMQError:
            found = None
        user = found if isinstance(found, str) else None
        frames = [part.bytes for part in parts]
        if cut:
            frames.append(b"")
        yield frames, user
