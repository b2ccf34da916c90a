"""The throwaway PostgreSQL server the PostgreSQL store's tests run on: it starts, takes
durable commits, and is gone with the session."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.timeout(120)


def test_the_session_server_commits_durably_and_answers_on_loopback(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        assert int(connection.execute("SHOW server_version_num").fetchone()[0]) >= 150000
        assert connection.execute("SHOW fsync").fetchone()[0] == "on"
        assert connection.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        connection.execute("CREATE TABLE probe (id int PRIMARY KEY, note text)")
        connection.execute("INSERT INTO probe VALUES (1, 'committed')")
    with psycopg.connect(postgres_url, autocommit=True) as again:  # a second connection sees the commit
        assert again.execute("SELECT note FROM probe WHERE id = 1").fetchone()[0] == "committed"
        again.execute("DROP TABLE probe")
