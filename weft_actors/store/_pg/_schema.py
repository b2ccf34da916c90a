"""The PostgreSQL schema: one table per keyspace, and the migrations that made it.

Every keyspace of the store is a table ``weft_<name> (k bytea primary key, v bytea)`` holding
the same keys and values as on LMDB, so the store's named transactions and its checker run
unchanged on both backends. ``weft_migrations`` records each schema version applied, with
when; an engine refuses a database whose newest version is one it does not know.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from ...errors import SchemaVersionError, StorageError
from .._env import DATABASES, SCHEMA_VERSION as STORE_SCHEMA_VERSION
from .._memo import fill_memo
from .._recent import fill_recent

__all__ = ["SCHEMA_VERSION", "PgDatabases", "table_of", "migrate", "check_version", "require_store"]

SCHEMA_VERSION: Final = STORE_SCHEMA_VERSION
"""The keyspaces hold LMDB's keys and values, so their layout has LMDB's version number: a
database is created at the version of its day (4 was the first on PostgreSQL) and a later
layout change migrates both backends to the same next number."""

FIRST_VERSION: Final = 4

TABLE_PREFIX: Final = "weft_"


def table_of(name: str) -> str:
    return TABLE_PREFIX + name


class PgDatabases:
    """The tables of the keyspaces, named as ``Databases`` names LMDB's handles."""

    __slots__ = DATABASES

    def __init__(self) -> None:
        for name in DATABASES:
            setattr(self, name, table_of(name))


def _create(conn: psycopg.Connection[Any]) -> None:
    for name in DATABASES:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table_of(name)} (k bytea PRIMARY KEY, v bytea NOT NULL)")


def _add_recent(conn: psycopg.Connection[Any]) -> None:
    """Version 5: the ``recent`` table, filled from the visibility table (``_recent``)."""
    _create(conn)
    conn.execute(f"DELETE FROM {table_of('recent')}")
    fill_recent(conn, table_of("visibility"), table_of("recent"))


def _add_memo(conn: psycopg.Connection[Any]) -> None:
    """Version 6: the ``memo`` table, filled from the workflow records (``_memo``)."""
    _create(conn)
    conn.execute(f"DELETE FROM {table_of('memo')}")
    fill_memo(conn, table_of("workflows"), table_of("memo"))


_MIGRATIONS: Final = {FIRST_VERSION: _create, 5: _add_recent, 6: _add_memo}
"""version -> what brings a database of the version before it up to it."""


def stored_version(conn: psycopg.Connection[Any]) -> int | None:
    """The newest schema version recorded, or None where there is no store yet. Reads only."""
    row = conn.execute("SELECT to_regclass('weft_migrations') IS NOT NULL").fetchone()
    if not (row and row[0]):
        return None
    row = conn.execute("SELECT coalesce(max(version), 0) FROM weft_migrations").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: psycopg.Connection[Any], where: str) -> int:
    """Create or upgrade the schema in one transaction (serialised across engines by a lock),
    and return the version. ``SchemaVersionError`` for a database of a newer version.

    A schema already current is only read: opening a store writes nothing then, so an engine
    starts (and serves reads) on a server that refuses writes for now (a demoted primary, a
    write freeze), where ``CREATE TABLE IF NOT EXISTS`` is refused even when it would do nothing."""
    current = stored_version(conn)
    if current is not None:
        _refuse_newer(current, where)
        if current == SCHEMA_VERSION:
            return SCHEMA_VERSION
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/weft_actors/migrate'))")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS weft_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT coalesce(max(version), 0) FROM weft_migrations").fetchone()
        stored = int(row[0]) if row else 0
        _refuse_newer(stored, where)
        if stored < FIRST_VERSION:  # a new database (no version of this backend is older)
            _create(conn)
            stored = SCHEMA_VERSION
            conn.execute("INSERT INTO weft_migrations (version) VALUES (%s)", (stored,))
        for version in range(stored + 1, SCHEMA_VERSION + 1):
            _MIGRATIONS[version](conn)
            conn.execute("INSERT INTO weft_migrations (version) VALUES (%s)", (version,))
    return SCHEMA_VERSION


def check_version(conn: psycopg.Connection[Any], where: str) -> int:
    """The schema version of a store opened read-only, which may create or upgrade nothing:
    ``StorageError`` if there is no store there or it needs an upgrade first,
    ``SchemaVersionError`` if it is newer than this code."""
    stored = stored_version(conn)
    if stored is None:
        raise StorageError(f"no weft_actors store at {where} (nothing to open read-only)", path=where)
    _refuse_newer(stored, where)
    if stored < SCHEMA_VERSION:
        raise StorageError(
            f"the database at {where} has weft_actors schema version {stored} and needs an upgrade to "
            f"{SCHEMA_VERSION}: open it read-write once (an engine or the supervisor does)",
            path=where,
        )
    return stored


def require_store(conn: psycopg.Connection[Any], where: str, why: str = "nothing was created") -> None:
    """``StorageError`` if the database (its ``search_path``) holds no weft_actors store: only
    an engine or a supervisor creates one, never a command that reads or maintains it."""
    row = conn.execute("SELECT to_regclass('weft_migrations') IS NOT NULL").fetchone()
    if not (row and row[0]):
        raise StorageError(f"no weft_actors store at {where} ({why})", path=where)


def _refuse_newer(stored: int, where: str) -> None:
    if stored > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the database at {where} has weft_actors schema version {stored}; this code "
            f"understands up to {SCHEMA_VERSION}: upgrade weft_actors",
            stored_version=stored,
            code_version=SCHEMA_VERSION,
        )
