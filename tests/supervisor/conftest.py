"""Fixtures of the supervisor tests."""

from __future__ import annotations

import pytest

from _two_hosts import new_schema


@pytest.fixture(params=["lmdb", "postgresql"])
def either_store(request: pytest.FixtureRequest, tmp_path) -> str:
    """The store a supervisor opens: LMDB in a temporary directory, or a fresh schema on the
    throwaway PostgreSQL server (whose commits complete off the loop)."""
    if request.param == "postgresql":
        return new_schema(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "data")
