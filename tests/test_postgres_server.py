"""The throwaway PostgreSQL server the tests of a PostgreSQL store will run on: it starts,
takes durable commits, and is gone with the session."""

from __future__ import annotations

import asyncio

import pytest

asyncpg = pytest.importorskip("asyncpg")

pytestmark = pytest.mark.timeout(120)


def test_the_session_server_commits_durably_and_answers_on_loopback(postgres_url: str) -> None:
    async def main() -> None:
        connection = await asyncpg.connect(postgres_url)
        try:
            version = await connection.fetchval("SHOW server_version_num")
            assert int(version) >= 150000
            assert await connection.fetchval("SHOW fsync") == "on"
            assert await connection.fetchval("SHOW synchronous_commit") == "on"
            await connection.execute("CREATE TABLE probe (id int PRIMARY KEY, note text)")
            await connection.execute("INSERT INTO probe VALUES (1, 'committed')")
        finally:
            await connection.close()
        again = await asyncpg.connect(postgres_url)  # a second connection sees the commit
        try:
            assert await again.fetchval("SELECT note FROM probe WHERE id = 1") == "committed"
            await again.execute("DROP TABLE probe")
        finally:
            await again.close()

    asyncio.run(main())
