"""The console's data, as the JSON API serves it and the pages render it.

Everything the CLI shows comes through a ``Client`` on the supervisor's own endpoint
(``stats``, with the store's workflow counts by type and status; ``describe``, with its ISO
8601 times, owner shard and op times; the actions), so the console and
``python -m weft_actors`` never disagree; only the newest-first list reads the store's
visibility index directly (``_listing``), since no client call orders by time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import time
from typing import Any, Mapping

from .._cli_memo import parse_memo_text
from .._isotime import iso_utc
from .._schedule_spec import SCHEDULE_TYPE
from ..bus import Client
from ..errors import InvalidRequest, WeftError
from ..store import LmdbStore
from ._list_columns import add_run_columns
from ._listing import STATUSES, ListQuery, newest_first
from ._memo_page import memo_newest_first
from ._pacing import ReadPacer

__all__ = ["overview", "workflows", "workflow", "schedules", "list_query", "encode_cursor", "MAX_LIMIT", "ReadPacer"]

MAX_LIMIT = 500
DEFAULT_LIMIT = 50


_LATEST = 253402300799.0
"""9999-12-31T23:59:59Z, the last moment ISO 8601 and ``datetime`` can write."""


def parse_time(text: str, what: str) -> float:
    """Epoch seconds from epoch seconds or ISO 8601 (UTC unless it names a zone), between 0
    and the year 9999: ``nan``, ``inf`` or ``1e308`` is a bad request, not a failed one."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidRequest(f"{what} must be ISO 8601 or epoch seconds") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        seconds = moment.timestamp()
    if not 0 <= seconds <= _LATEST:  # also False for nan
        raise InvalidRequest(f"{what} must be a time between 1970 and 9999")
    return seconds


def encode_cursor(cursor: tuple[int, str] | None) -> str | None:
    if cursor is None:
        return None
    return base64.urlsafe_b64encode(f"{cursor[0]}:{cursor[1]}".encode()).decode()


def _decode_cursor(text: str) -> tuple[int, str]:
    try:
        updated, _, wid = base64.urlsafe_b64decode(text.encode()).decode().partition(":")
        return int(updated), wid
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidRequest("malformed cursor (pass back the one a page gave)") from None


def list_query(params: Mapping[str, str]) -> ListQuery:
    """The Workflows filter from query parameters ``status``, ``type``, ``prefix``, ``from``,
    ``to`` (ISO 8601 or epoch seconds), ``limit``, ``cursor`` and ``memo`` (``KEY=VALUE,
    ...``); empty ones are ignored."""
    status = params.get("status") or None
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"unknown status; one of {', '.join(STATUSES)}")
    try:
        limit = int(params.get("limit") or DEFAULT_LIMIT)
    except ValueError:
        raise InvalidRequest("limit must be a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}")
    updated_from = parse_time(params["from"], "from") if params.get("from") else None
    updated_to = parse_time(params["to"], "to") if params.get("to") else None
    return ListQuery(
        status=status,
        type=params.get("type") or None,
        prefix=params.get("prefix") or "",
        updated_from=updated_from,
        updated_to=updated_to,
        limit=limit,
        after=_decode_cursor(params["cursor"]) if params.get("cursor") else None,
        memo=_memo_text(params.get("memo") or ""),
    )


def _memo_text(text: str) -> str:
    """The memo filter as typed, once it reads (``InvalidRequest``, a bad request, if not)."""
    parse_memo_text(text)
    return text.strip()


def overview(client: Client) -> dict[str, Any]:
    """``stats`` (readiness, the supervisor's figures, one entry per shard, the workflows by
    type and status) and the number of workflows by status: read from the counts the store
    keeps, not by a pass over its workflows."""
    stats = client.stats()
    by_type: list[dict[str, Any]] = list(stats.get("workflows") or ())
    counts = dict.fromkeys(STATUSES, 0)
    for entry in by_type:
        counts[entry["status"]] = counts.get(entry["status"], 0) + entry["count"]
    return {"ready": stats["ready"], "supervisor": stats["supervisor"], "shards": stats["shards"], "counts": counts, "workflows": by_type}


def workflows(store: LmdbStore, query: ListQuery, pacer: ReadPacer | None = None) -> dict[str, Any]:
    """One page of the newest-first list (``_listing.newest_first``: it reads about as many
    index entries as it shows), its cursor encoded for a URL, and the filter it answers. The
    read waits for its turn from ``pacer`` (``_pacing``), which keeps the console's reads to a
    bounded share of the supervisor's time."""
    with pacer.turn() if pacer is not None else contextlib.nullcontext():
        began = time.perf_counter()
        with store.read() as txn:
            memo = parse_memo_text(query.memo)
            page = newest_first(txn, store.dbs, query) if memo is None else memo_newest_first(txn, store.dbs, query, memo)
            add_run_columns(txn, store.dbs, page["items"], time.time())
        page["read_ms"] = round((time.perf_counter() - began) * 1000, 3)
    for item in page["items"]:
        item["updated_iso"] = iso_utc(item["updated"])
    page["cursor"] = encode_cursor(page["cursor"])
    page["filter"] = {
        "status": query.status,
        "type": query.type,
        "prefix": query.prefix,
        "from": iso_utc(query.updated_from),
        "to": iso_utc(query.updated_to),
        "limit": query.limit,
        "memo": query.memo,
    }
    return page


def workflow(client: Client, wid: str) -> dict[str, Any]:
    """``describe`` as the CLI gets it: ISO 8601 times beside the raw ones, the owner's
    shard (slot, pid) beside its engine id, the input, the op times and the timers."""
    return client.get_handle(wid).describe()


SCHEDULES_SHOWN = 200
"""Schedules the Schedules page lists (each is described: one query to its owner)."""


def schedules(client: Client) -> dict[str, Any]:
    """Every schedule (up to ``SCHEDULES_SHOWN``), each as its ``describe`` says; one whose
    owner cannot answer now shows the error instead."""
    page = client.list(type=SCHEDULE_TYPE, limit=SCHEDULES_SHOWN)
    items = []
    for item in page["items"]:
        try:
            items.append({**client.get_schedule(item["id"]).describe(), "status": item["status"]})
        except WeftError as exc:
            items.append({"id": item["id"], "status": item["status"], "error": f"{exc.code}: {exc}"})
    return {"items": items, "more": page["cursor"] is not None}
