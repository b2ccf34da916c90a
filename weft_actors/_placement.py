"""Rendezvous hashing: which live engine prefers a workflow. An optimisation only."""

from __future__ import annotations

import hashlib
from typing import Iterable

__all__ = ["preferred"]


def _score(engine_id: str, wid: str) -> bytes:
    return hashlib.blake2b(f"{engine_id}/{wid}".encode(), digest_size=8).digest()


def preferred(wid: str, engines: Iterable[str]) -> str | None:
    best: str | None = None
    best_score = b""
    for engine_id in engines:
        score = _score(engine_id, wid)
        if best is None or score > best_score:
            best, best_score = engine_id, score
    return best
