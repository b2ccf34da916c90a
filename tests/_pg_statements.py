"""The statements a PostgreSQL store sends, recorded on its own connection: what the tests of
its group commit count and read (one statement per table, plain inserts or upserts), and the
batch of workflows those tests create and finish."""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any, Iterator

import psycopg

from weft_actors.codec import encode, encode_args
from weft_actors.store import Created, CreateWorkflow, Finish, StepCommit
from weft_actors.testing import FakeClock

__all__ = ["BATCH", "RecordingCursor", "recorded", "writes_by_table", "pg_store", "registered_store", "created_batch", "finishing"]

BATCH = 40
"""Workflows in the batch ``created_batch`` makes."""


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


@contextlib.contextmanager
def registered_store(schema_url: str) -> Iterator[tuple[Any, str]]:
    """``(store, engine id)``: a ``pg_store`` with a live engine registered, closed at the end."""
    store = pg_store(schema_url)
    try:
        engine = uuid.uuid4().hex
        store.register_engine(engine, heartbeat=0.5, ttl=3.0)
        yield store, engine
    finally:
        store.close()


def created_batch(store: Any, engine: str, name: str = "w") -> tuple[list[str], list[CreateWorkflow], list[Any]]:
    """``BATCH`` workflows created by ``engine`` in one commit: its statements, the intents and
    their results (each a new workflow)."""
    intents = [CreateWorkflow(f"{name}-{i}", "Order", encode_args((i,)), uuid.uuid4().hex) for i in range(BATCH)]
    texts, created = recorded(store, lambda: store.apply(engine, intents))
    assert all(isinstance(result, Created) and result.created for result in created), created
    return texts, intents, created


def finishing(intents: list[Any], created: list[Any], seq: int, value: int | None = None) -> list[StepCommit]:
    """A step of each created workflow that records activity op ``seq`` (outcome ``value``,
    ``seq`` by default) and completes the workflow with it."""
    value = seq if value is None else value
    op = encode({"kind": "activity", "name": "charge", "outcome": {"ok": value}})
    return [
        StepCommit(intent.wid, result.epoch, intent.run_id, ops=((seq, op),), finish=Finish("completed", result=encode(value)))
        for intent, result in zip(intents, created)
    ]
