"""Choosing the backend by where the store is: a directory is LMDB, a URL is PostgreSQL."""

from __future__ import annotations

import os
from typing import Any

from ._base import KeyspaceStore

__all__ = ["open_store", "is_store_url", "describe_location"]

_URL_SCHEMES = ("postgresql://", "postgres://")


def is_store_url(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL database rather than a directory."""
    return location.startswith(_URL_SCHEMES)


def describe_location(location: str) -> str:
    """``location`` fit for a log line: a URL loses its password, a path becomes absolute."""
    if is_store_url(location):
        from ._pg._env import redact

        return redact(location)
    return os.path.abspath(location)


def open_store(location: str, **options: Any) -> KeyspaceStore:
    """The store at ``location``. LMDB-only options (``map_size``, ``sync``) mean nothing to
    PostgreSQL, which is always durable, and are dropped for it; ``readonly`` means what it
    does for LMDB (nothing is created, upgraded or written: a read-only role can open it).
    ``create=False`` (an operator command) opens a store only where one exists: a path or a
    database that holds none is ``StorageError``, and nothing is created there."""
    if is_store_url(location):
        try:
            from ._pg import PgStore
        except ImportError as exc:  # psycopg is the ``postgres`` extra
            raise ImportError(
                "a postgresql:// store needs the PostgreSQL driver: pip install 'weft_actors[postgres]'"
            ) from exc
        for name in ("map_size", "sync"):
            options.pop(name, None)
        return PgStore(location, **options)
    from ._store import LmdbStore

    return LmdbStore(location, **options)
