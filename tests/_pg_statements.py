"""The statements a PostgreSQL store sends, recorded on its own connection: what the tests of
its group commit count and read (one statement per table, plain inserts or upserts)."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from weft_actors.testing import FakeClock

__all__ = ["RecordingCursor", "recorded", "writes_by_table", "pg_store"]


class RecordingCursor(psycopg.Cursor):  # type: ignore[type-arg]
    texts: list[str] = []

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        RecordingCursor.texts.append(str(query))
        return super().execute(query, *args, **kwargs)


def recorded(store: Any, call: Any) -> tuple[list[str], Any]:
    """The text of every statement ``call`` sent on the store's connection, and its result."""
    conn = store.env.conn
    conn.cursor_factory = RecordingCursor
    RecordingCursor.texts = []
    try:
        result = call()
    finally:
        conn.cursor_factory = psycopg.Cursor
    return RecordingCursor.texts, result


def writes_by_table(texts: list[str]) -> dict[str, list[str]]:
    """Each ``weft_`` table written (inserted into, deleted from) -> the statements writing it."""
    found: dict[str, list[str]] = {}
    for text in texts:
        for table in set(re.findall(r"(?:INSERT INTO|DELETE FROM) (weft_\w+)", text)):
            found.setdefault(table, []).append(text)
    return found


def pg_store(schema_url: str) -> Any:
    """A store on ``schema_url`` with a fake clock."""
    from weft_actors.store._pg import PgStore

    return PgStore(schema_url, clock=FakeClock())
