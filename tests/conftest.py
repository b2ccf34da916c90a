"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import pwd
from typing import Iterator

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
