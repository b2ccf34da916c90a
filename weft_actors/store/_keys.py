"""Key encoding: big-endian integers and length-prefixed ids, so LMDB's byte order is the
logical order and every prefix scan is exact."""

from __future__ import annotations

import functools
import struct
from typing import Final

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")

NO_ENGINE: Final = bytes(16)
"""The ``by_engine`` prefix of running workflows that have no holder (released, or never claimed)."""

START_SEQ: Final = 0xFFFFFFFF
"""Timer sequence number of a delayed start (``pending`` -> ``running``)."""
DEADLINE_SEQ: Final = 0xFFFFFFFE
"""Timer sequence number of an execution timeout."""
SYSTEM_TIMER_SEQS: Final = frozenset({START_SEQ, DEADLINE_SEQ})

STATUS_CODES: Final = {
    "pending": 1,
    "running": 2,
    "completed": 3,
    "failed": 4,
    "cancelled": 5,
    "terminated": 6,
    "timed_out": 7,
    "continued": 8,
    "quarantined": 9,
    "stuck": 10,
}
STATUS_NAMES: Final = {code: name for name, code in STATUS_CODES.items()}
STATUSES: Final = tuple(STATUS_CODES)
"""Every status a workflow record can have, in their code order."""
TERMINAL: Final = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out", "continued"})

pack_u64 = _U64.pack
unpack_u64 = _U64.unpack_from
pack_u32 = _U32.pack


def wid_key(wid: str) -> bytes:
    return wid.encode()


def prefixed(wid: str) -> bytes:
    """``len(wid) || wid``: a prefix no other workflow id can extend."""
    raw = wid.encode()
    return _U16.pack(len(raw)) + raw


@functools.lru_cache(maxsize=1 << 16)
def run_prefix(wid: str, run_id: str) -> bytes:
    return prefixed(wid) + bytes.fromhex(run_id)


def op_key(wid: str, run_id: str, seq: int) -> bytes:
    return run_prefix(wid, run_id) + _U32.pack(seq)


def op_seq(key: bytes) -> int:
    return _U32.unpack_from(key, len(key) - 4)[0]


def inbox_key(wid: str, seq: int) -> bytes:
    return prefixed(wid) + _U64.pack(seq)


def inbox_seq(key: bytes) -> int:
    return _U64.unpack_from(key, len(key) - 8)[0]


@functools.lru_cache(maxsize=1024)
def ms(seconds: float) -> int:
    """Whole milliseconds. Cached: one transaction stamps every workflow it touches with the
    same ``now``, several times each (holder, visibility, expiring)."""
    return max(0, int(round(seconds * 1000)))


def timer_key(fire_at: float, wid: str, seq: int) -> bytes:
    return _U64.pack(ms(fire_at)) + _U32.pack(seq) + wid.encode()


def split_timer_key(key: bytes) -> tuple[float, int, str]:
    fire_ms, seq = struct.unpack_from(">QI", key)
    return fire_ms / 1000.0, seq, key[12:].decode()


def engine_key(engine_id: str) -> bytes:
    return bytes.fromhex(engine_id)


def by_engine_key(engine_raw: bytes, wid: str) -> bytes:
    return engine_raw + wid.encode()


@functools.lru_cache(maxsize=4096)
def visibility_group(status: str, wf_type: str) -> bytes:
    """``status(1) || len(type)(2) || type``: the prefix of one (status, type) group."""
    raw_type = wf_type.encode()
    return bytes((STATUS_CODES[status],)) + _U16.pack(len(raw_type)) + raw_type


def visibility_key(status: str, wf_type: str, wid: str) -> bytes:
    """``group || wid``. ``updated`` is the entry's value, not part of the key: a workflow
    keeps one position per group however often it is touched, which is what makes listing
    cursors stable (see ``_listing``)."""
    return visibility_group(status, wf_type) + wid.encode()


@functools.lru_cache(maxsize=1024)
def visibility_value(updated: float) -> bytes:
    """``updated ms(8)``: a visibility entry's value, and the head of an ``expiring_key``.
    Cached as ``ms`` is (one ``now`` per transaction)."""
    return _U64.pack(ms(updated))


def split_visibility_key(key: bytes) -> tuple[str, str, str]:
    """``(status, type, wid)``; raises on a key that is not a visibility key."""
    status = STATUS_NAMES[key[0]]
    (type_len,) = _U16.unpack_from(key, 1)
    if len(key) < 3 + type_len:
        raise ValueError("truncated visibility key")
    return status, key[3 : 3 + type_len].decode(), key[3 + type_len :].decode()


COUNT_PREFIX: Final = b"count/"
"""``meta`` keys ``count/ || group``: how many workflows one (status, type) group holds. In
``meta``, not a keyspace of their own: a transaction that writes them often writes ``meta``
anyway (the feed sequence), and then they cost no page of their own, which matters when a
full store's last pages are kept for closes and purges (``_reserve``)."""


def count_key(group: bytes) -> bytes:
    return COUNT_PREFIX + group


def split_visibility_group(group: bytes) -> tuple[str, str]:
    """``(status, type)`` of a group prefix (a count key without its prefix); raises on
    anything else."""
    (type_len,) = _U16.unpack_from(group, 1)
    if len(group) != 3 + type_len:
        raise ValueError("not a visibility group")
    return STATUS_NAMES[group[0]], group[3:].decode()


def group_length(key: bytes) -> int:
    """Length of the (status, type) group prefix at the start of a visibility key."""
    return 3 + _U16.unpack_from(key, 1)[0]


def expiring_key(updated: float, wid: str) -> bytes:
    """``updated ms(8) || wid``: a finished workflow whose history awaits the retention prune."""
    return _U64.pack(ms(updated)) + wid.encode()


HOLDER_LEN: Final = 24


def holder_value(engine_raw: bytes, epoch: int, claimed_at: float) -> bytes:
    """``engine(16) || epoch(8) || claimed_at ms(8)``; the first 24 bytes are the fence."""
    return engine_raw + _U64.pack(epoch) + _U64.pack(ms(claimed_at))


def fence(engine_raw: bytes, epoch: int) -> bytes:
    return engine_raw + _U64.pack(epoch)


def split_holder(value: bytes) -> tuple[str, int, float]:
    epoch, claimed_ms = struct.unpack_from(">QQ", value, 16)
    return value[:16].hex(), epoch, claimed_ms / 1000.0
