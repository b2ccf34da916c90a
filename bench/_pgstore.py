"""A fresh schema on a PostgreSQL server per bench run, so runs never see each other's data."""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterator

__all__ = ["scratch_schema", "scratch_database", "scratch_store", "postgres_cpu_seconds"]


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
def scratch_database(url: str) -> Iterator[str]:
    """The URL of a new, empty database on ``url``'s server (dropped on the way out): for a
    peer that makes schemas of its own."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = "bench_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    info = conninfo_to_dict(url)
    info["dbname"] = name
    user = info.get("user", "")
    try:
        yield f"postgresql://{user}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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


def postgres_cpu_seconds(url: str | None) -> float:
    """CPU seconds used so far by the PostgreSQL server at ``url`` if it runs on this machine
    (its postmaster, every live child: backends, writers, autovacuum, and the children it has
    reaped: sessions that ended), else 0.0: the
    database's share of a run. Other servers on the machine are not counted."""
    import os

    if not url:
        return 0.0
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        with open(os.path.join(str(row[0]), "postmaster.pid")) as file:
            postmaster = int(file.readline())
    except (OSError, ValueError, psycopg.Error):
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as file:
                values = file.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(pid) == postmaster:  # and the children it has reaped: sessions that ended
            total += int(values[11]) + int(values[12]) + int(values[13]) + int(values[14])
        elif int(values[1]) == postmaster:  # values[1]: the parent
            total += int(values[11]) + int(values[12])  # utime, stime
    return total / ticks
