"""The Workflows list's run columns: start, end, duration and run id of each listed workflow,
read from its record in the snapshot that listed it.

One record read per listed row (a page is at most ``MAX_LIMIT`` rows), never per workflow in
the store: the order and the filters stay the ``recent`` index's (``_listing``). A workflow
still going has no end; its duration runs to ``now``.
"""

from __future__ import annotations

from typing import Any

import lmdb

from .._isotime import iso_utc
from ..store import TERMINAL
from ..store._env import Databases
from ..store._queries import get_workflow

__all__ = ["add_run_columns"]


def add_run_columns(txn: lmdb.Transaction[bytes], dbs: Databases, items: list[dict[str, Any]], now: float) -> None:
    """Fill ``started``, ``ended`` (None while it runs), their ``_iso`` twins, ``duration``
    (seconds) and ``run_id`` into each of ``items`` (``None`` for a record gone since)."""
    for item in items:
        record = get_workflow(txn, dbs, item["id"])
        if record is None:
            item.update(started=None, ended=None, duration=None, run_id=None, started_iso=None, ended_iso=None)
            continue
        start_at = record.get("start_at")
        started = max(record["created"], start_at) if isinstance(start_at, (int, float)) else record["created"]
        ended = record["updated"] if record["status"] in TERMINAL else None
        item.update(
            started=started,
            ended=ended,
            duration=max(0.0, (now if ended is None else ended) - started),
            run_id=record.get("run_id"),
            started_iso=iso_utc(started),
            ended_iso=iso_utc(ended),
        )
