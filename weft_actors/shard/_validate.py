"""Checks of engine configuration and of caller input, done before anything is written."""

from __future__ import annotations

import os
import random
import time
from typing import Final

from .._checks import MAX_ID_BYTES, check_instant, check_seconds, validate_id, validate_name
from ..errors import PayloadTooLarge

__all__ = ["validate_timing", "validate_id", "validate_name", "check_seconds", "check_instant", "check_payload", "new_id", "OWNERSHIP_MODES", "MAX_ID_BYTES"]

OWNERSHIP_MODES: Final = ("workflow-lease", "single")
_EPSILON: Final = 1e-9


def validate_timing(heartbeat: float, ttl: float) -> None:
    """``heartbeat < ttl`` and ``ttl >= 3 * heartbeat``, both positive: a lease must survive
    two missed heartbeats, or a busy but healthy engine would be taken over."""
    if not heartbeat > 0 or not ttl > 0:
        raise ValueError(f"heartbeat ({heartbeat}) and ttl ({ttl}) must both be > 0")
    if heartbeat >= ttl:
        raise ValueError(f"heartbeat ({heartbeat}) must be shorter than ttl ({ttl})")
    if ttl < 3 * heartbeat - _EPSILON:  # 3 * 0.2 is 0.6000000000000001 in floats
        raise ValueError(f"ttl ({ttl}) must be at least 3 * heartbeat ({3 * heartbeat}): a lease must outlive two missed heartbeats")


_random = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _random.seed(os.urandom(32)))


def new_id() -> str:
    """A 32-hex-digit id that sorts by creation time: the millisecond, then 80 random bits
    (like UUIDv7). Ids made close together land close together in every keyspace they key,
    so a commit of many new workflows dirties a few B-tree pages per keyspace instead of one
    per workflow (a random id cost about 8 pages, 33 KB written, per workflow)."""
    return f"{int(time.time() * 1000):012x}{_random.getrandbits(80):020x}"


def check_payload(data: bytes, what: str, limit: int) -> bytes:
    """``data`` itself, or ``PayloadTooLarge`` if it is over ``limit`` bytes: checked before
    anything is written, so a call that carries too much writes nothing."""
    if len(data) > limit:
        raise PayloadTooLarge(f"{what} is {len(data)} bytes; the limit is {limit}", size=len(data), limit=limit)
    return data
