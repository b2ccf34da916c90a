"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import pwd
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from _postgres import PostgresServer, find_bindir


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session (``_postgres``): its database's URL."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (initdb, pg_ctl): .ci/run installs it")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a postgres user to run initdb as")
    with PostgresServer(bindir) as server:
        yield server.url


@pytest.fixture
def schema_url(postgres_url: str) -> Iterator[str]:
    """A store URL naming a fresh schema of the session's server (its ``search_path``), so a
    test's tables are its own; dropped afterwards. A killed process's session may still hold
    a lock on it for a moment: the drop waits 5 s at most, then leaves it to the server's end."""
    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield f"{postgres_url}?options=-csearch_path%3D{schema}"
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '5s'")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    except psycopg.Error:
        pass


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of the slow tier's files ``slow`` (``_tiers``)."""
    from _tiers import SLOW_FILES

    root = Path(__file__).parent
    for item in items:
        try:
            relative = Path(str(item.path)).relative_to(root).as_posix()
        except ValueError:
            continue
        if relative in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest's signature
    """The chaos runs' summary lines (seed first) at the end of the report. Each travels in
    its test's report (``user_properties``), so a pytest-xdist worker's run reaches the
    controller, which collects nothing itself (hence here, not in tests/chaos/)."""
    lines = [value for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []) for name, value in getattr(report, "user_properties", ()) if name == "chaos"]
    if lines:
        terminalreporter.section("chaos")
        for line in lines:
            terminalreporter.write_line(line)
