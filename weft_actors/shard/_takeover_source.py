"""Whom a takeover took a workflow from, in words for its log line.

A takeover's candidate either has a holder (an engine lost while it held the workflow) or
none (released at a stop, or never claimed). The store knows more than either: the engine
that released a claim (``released_by``) and every engine's record (shard slot, host, pid and
state), so the line says ``engine E (shard 1 of host A, pid 4242, stopped: released its
workflows)`` instead of ``nobody``. Read only on a takeover, once per chunk taken.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["describe_engine", "takeover_sources", "NOBODY"]

NOBODY = "nobody (released, or never claimed)"

_STATES = {
    "live": "its lease expired",
    "expired": "gone: its lease expired",
    "dead": "gone: its process died",
    "stopped": "stopped: released its workflows",
}


def describe_engine(engine_id: str, record: Mapping[str, Any] | None) -> str:
    """``engine E (shard S of host H, pid P, <what became of it>)`` from its registry record."""
    if record is None:
        return f"engine {engine_id} (gone: its record pruned)"
    where = []
    slot, host = record.get("slot"), record.get("host")
    if slot is not None:
        where.append(f"shard {slot}" + (f" of host {host}" if host else ""))
    elif host:
        where.append(f"host {host}")
    if record.get("pid") is not None:
        where.append(f"pid {record['pid']}")
    where.append(_STATES.get(str(record.get("state")), str(record.get("state"))))
    return f"engine {engine_id} ({', '.join(where)})"


def takeover_sources(store: Any, wanted: list[tuple[str, bytes | None]]) -> dict[str, tuple[str | None, str]]:
    """``wid -> (the previous engine's id or None, its description)`` for each candidate."""
    released = store.released_by([wid for wid, holder in wanted if holder is None]) if any(holder is None for _, holder in wanted) else {}
    records = store.engines()
    sources: dict[str, tuple[str | None, str]] = {}
    for wid, holder in wanted:
        previous = holder[:16].hex() if holder is not None else released.get(wid)
        sources[wid] = (previous, NOBODY if previous is None else describe_engine(previous, records.get(previous)))
    return sources
