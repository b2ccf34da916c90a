"""A fresh schema on a PostgreSQL server per bench run, so runs never see each other's data."""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterator

__all__ = ["scratch_schema", "scratch_store"]


@contextlib.contextmanager
def scratch_schema(url: str) -> Iterator[str]:
    """The URL of a new, empty schema in ``url``'s database (dropped on the way out)."""
    import psycopg

    schema = "bench_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in url else "?"
    try:
        yield f"{url}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def scratch_store(store: str | None, data: str | None) -> Iterator[str]:
    """Where a bench keeps its store: a fresh schema of ``store`` (a PostgreSQL URL) if given,
    else ``data`` or a fresh temporary directory (LMDB)."""
    from _harness import scratch_dir

    if store:
        with scratch_schema(store) as location:
            yield location
    else:
        with scratch_dir(data) as path:
            yield path
