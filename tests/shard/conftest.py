"""The engine tests named in ``ON_BOTH_BACKENDS`` run twice: on LMDB, and on PostgreSQL.
(The others read the LMDB directory behind the engine's back, or run an engine in a child
process on it, so they stay on LMDB.)

They give ``Engine`` a temporary directory, as a user of the embedded store would. For the
PostgreSQL run the engine's ``open_store`` is routed so that each such directory names a schema
of its own on the session's throwaway server (``postgres_url``): the same test, unchanged,
then drives the engine on the other backend.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Iterator

import psycopg
import pytest

import weft_actors.shard._engine as engine_module
from weft_actors.store import is_store_url, open_store

ON_BOTH_BACKENDS = frozenset({
    "test_engine_basics",
    "test_execute",
    "test_semantics_children",
    "test_semantics_combinators",
    "test_semantics_lifecycle",
    "test_semantics_network",
    "test_semantics_recovery",
    "test_semantics_updates",
    "test_describe",
    "test_listing",
    "test_eviction",
    "test_start_arguments",
    "test_run_boundaries",
    "test_cancel_reentry",
    "test_expiry_wake",
    "test_signal_request_id",
    "test_stuck",
    "test_live_describe",
    "test_handoff",
    "test_handoff_marks",
})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rpartition(".")[2] in ON_BOTH_BACKENDS:
        metafunc.parametrize("store_backend", ["lmdb", "postgresql"], indirect=True)


@pytest.fixture(autouse=True)
def store_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    backend = getattr(request, "param", "lmdb")
    if backend != "postgresql":
        yield backend
        return
    server = request.getfixturevalue("postgres_url")
    schemas: list[str] = []

    def routed(location: str, **options: Any) -> Any:
        if is_store_url(location):
            return open_store(location, **options)
        schema = "e_" + hashlib.sha256(os.path.realpath(location).encode()).hexdigest()[:16]
        if schema not in schemas:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            schemas.append(schema)
        return open_store(f"{server}?options=-csearch_path%3D{schema}", **options)

    monkeypatch.setattr(engine_module, "open_store", routed)
    yield backend
    with psycopg.connect(server, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
