"""Blame as evidence: what was on an engine's loop, kept where a taker can read it.

Each engine keeps a *loop slot*: the record it sets before and after every piece of user code
it runs on its loop (a workflow turn, a handler, a query, a step of an ``async def``
activity), and a small file in its data directory (``engines/<id>.loop``), mapped shared,
where its watchdog thread names that piece once it has held the loop for a tick: which
workflow, run, op and activity is on the loop now, since when. The file outlives the process,
so the supervisor that reaps a dead shard reads it (``death_blame``) and keeps what it names
in the engine's record (``blame``): a death is charged to a workflow only if its code held
the loop longer than the engine's stall threshold when the process ended, never because it
happened to be on the loop when something else killed the process.

A stalled engine that is still alive leaves a *stall note* instead (its watchdog writes it
once the loop is stuck past the threshold, from this slot): a file beside the slot on one
machine, a row of the store on PostgreSQL (``_pg._notes``) so that a taker on any host reads
it in its takeover transaction (``stall_note_key``). The takeover charges only the workflow
that the lost engine's death record or stall note names (``_quarantine.note_lost_owner``).
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import time
from typing import Any, Final

from ..codec import unpack_record
from . import _engines
from ._quarantine import read_stall_note, remove_stall_note, stall_note_path

__all__ = ["LoopSlot", "loop_slot_path", "read_loop_slot", "loop_turning", "death_blame", "remove_engine_notes", "stall_note_key", "blame_of"]

_THRESHOLD: Final = struct.Struct("<d")
_HEAD: Final = struct.Struct("<Bdqh")
"""At offset 8: busy flag, when the piece began (``time.monotonic``, one clock per machine),
its op seq (-1: none), the body's length."""
_HEAD_AT: Final = 8
_TURNED: Final = struct.Struct("<d")
"""At offset 32: when the loop last turned (``time.monotonic``; 0.0: not yet), for the
supervisor's hang judgment (``loop_turning``)."""
_TURNED_AT: Final = 32
_BODY_AT: Final = 64
SIZE: Final = 1024
_BODY_MAX: Final = SIZE - _BODY_AT
_NONE: Final = -1

STALL_PREFIX: Final = b"stall/"


def loop_slot_path(store_path: str, engine_id: str) -> str:
    return os.path.join(store_path, "engines", engine_id + ".loop")


def stall_note_key(engine_raw: bytes) -> bytes:
    """The ``meta`` key of an engine's stall note where the store keeps it (PostgreSQL)."""
    return STALL_PREFIX + engine_raw


class LoopSlot:
    """An engine's loop slot. The loop sets ``current`` before each piece of user code and
    clears it after (two attribute stores: the hot path); the watchdog thread copies it into
    the shared file (``publish``) once that piece has kept the loop from turning for a tick,
    and clears the file (``unpublish``) once the loop turns again. So the file names a
    workflow only while its code holds the loop, which is all that a taker or the supervisor
    needs, at no cost per step."""

    __slots__ = ("path", "current", "_map")

    def __init__(self, path: str, threshold: float) -> None:
        self.path = path
        self.current: Any = None
        """What runs on the loop now (the engine's own record: a run, an activity's info)."""
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
        try:
            # Written, not truncated to size: a sparse page of a full disk would be allocated
            # only when the mapping is first written, and that failing is a SIGBUS, not an error.
            if os.pwrite(fd, _THRESHOLD.pack(threshold) + bytes(SIZE - _THRESHOLD.size), 0) != SIZE:
                raise OSError(errno.ENOSPC, "could not write the engine's loop slot")
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)

    def publish(self, wid: str, run_id: str, seq: int | None, kind: str, name: str | None, entered: float) -> None:
        """Name in the file the user code of ``wid`` that holds the loop since ``entered``
        (``time.monotonic``): the body first, then the header that makes it valid."""
        body = f"{wid}\0{run_id}\0{kind}\0{name or ''}".encode()[:_BODY_MAX]
        size = len(body)
        buf = self._map
        buf[_HEAD_AT] = 0
        buf[_BODY_AT : _BODY_AT + size] = body
        _HEAD.pack_into(buf, _HEAD_AT, 1, entered, _NONE if seq is None else seq, size)

    def turned(self, at: float) -> None:
        """Stamp that the loop turned at ``at`` (``time.monotonic``): written by the watchdog
        thread, never the loop, so a loop that turns but cannot commit (its store's server
        stalls) still shows the supervisor it is alive, and a stopped process shows nothing."""
        _TURNED.pack_into(self._map, _TURNED_AT, at)

    def unpublish(self) -> None:
        """Nobody's code holds the loop."""
        self._map[_HEAD_AT] = 0

    def read(self) -> dict[str, Any] | None:
        """What the file names (None: nobody), with ``held`` (seconds) so far."""
        return _parse(self._map[:SIZE])

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # a reader's view still open: the mapping goes with the process
            pass


def _parse(raw: bytes) -> dict[str, Any] | None:
    if len(raw) < _BODY_AT:
        return None
    busy, entered, seq, size = _HEAD.unpack_from(raw, _HEAD_AT)
    if not busy or not 0 <= size <= _BODY_MAX:
        return None
    parts = raw[_BODY_AT : _BODY_AT + size].decode(errors="replace").split("\0", 3)
    if len(parts) != 4:
        return None
    wid, run_id, kind, name = parts
    (threshold,) = _THRESHOLD.unpack_from(raw, 0)
    return {
        "wid": wid,
        "run_id": run_id,
        "kind": kind,
        "name": name or None,
        "seq": None if seq == _NONE else seq,
        "held": max(0.0, time.monotonic() - entered),
        "threshold": threshold,
    }


def read_loop_slot(path: str) -> dict[str, Any] | None:
    """What the slot at ``path`` says is on its engine's loop (None: nothing, or no slot)."""
    try:
        with open(path, "rb") as source:
            return _parse(source.read(SIZE))
    except OSError:
        return None


def loop_turning(store_path: str, engine_id: str) -> bool:
    """Whether the engine's loop turned within its stall threshold, by its slot's stamp (read
    on this machine: one monotonic clock). False with no slot or no stamp yet: the judgment
    then goes by the engine's heartbeat alone."""
    try:
        with open(loop_slot_path(store_path, engine_id), "rb") as source:
            raw = source.read(_BODY_AT)
    except OSError:
        return False
    if len(raw) < _BODY_AT:
        return False
    (threshold,) = _THRESHOLD.unpack_from(raw, 0)
    (turned,) = _TURNED.unpack_from(raw, _TURNED_AT)
    return turned > 0 and time.monotonic() - turned <= threshold


def death_blame(store_path: str, engine_id: str) -> dict[str, Any] | None:
    """For the record of an engine whose process has surely ended: the workflow whose code
    held its loop past the stall threshold when it ended, else None (an idle loop, or code
    that was only passing through: a kill from outside is nobody's doing)."""
    found = read_loop_slot(loop_slot_path(store_path, engine_id))
    if found is None or found["held"] < found["threshold"]:
        return None
    return {key: found[key] for key in ("wid", "run_id", "kind", "name", "seq", "held")}


def remove_engine_notes(store_path: str, engine_id: str) -> None:
    """Delete the loop slot and stall note files of an engine pruned from the registry."""
    _unlink(loop_slot_path(store_path, engine_id))
    remove_stall_note(stall_note_path(store_path, engine_id))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def blame_of(txn: Any, dbs: Any, store_path: str, engine_raw: bytes) -> dict[str, Any] | None:
    """Whom the loss of engine ``engine_raw`` is charged to: its death record's ``blame``,
    else its stall note (in the store, else its file on this machine), else nobody."""
    record = _engines.engine_record(txn, dbs, engine_raw)
    if record is not None and record.get("blame"):
        blame: dict[str, Any] = record["blame"]
        return blame
    raw = txn.get(stall_note_key(engine_raw), db=dbs.meta)
    if raw is not None:
        note: dict[str, Any] = unpack_record(raw)
        return note
    return read_stall_note(stall_note_path(store_path, engine_raw.hex()))
