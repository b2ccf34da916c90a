"""Operator commands pointed at a place that holds no store: ``backup``, ``purge``, ``export``,
``replay`` and the checker refuse it, create nothing there and exit non-zero. Only an engine or
a supervisor creates a store (an LMDB directory, or the tables of a PostgreSQL schema)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

COMMANDS = {
    "backup": ["backup", "copy"],
    "purge-status": ["purge", "--status", "completed", "--yes"],
    "purge-id": ["purge", "--id", "w-1", "--yes"],
    "purge-dry-run": ["purge", "--older-than", "1d"],
    "export": ["export", "w-1"],
    "replay": ["replay", "w-1", "--app", "weft_actors.examples"],
}


def _run(cwd: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def _refused(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no weft_actors store at" in lines[0], done.stderr
    assert "written" not in done.stdout and "purged" not in done.stdout, done.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_on_the_default_path_without_a_store_creates_nothing(tmp_path, command):
    done = _run(tmp_path, "weft_actors", *COMMANDS[command])
    _refused(done)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no ./weft-data, no backup copy


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["backup", "purge-status", "replay"])
def test_a_command_on_an_empty_directory_leaves_it_empty(tmp_path, command):
    data = tmp_path / "data"
    data.mkdir()
    done = _run(tmp_path, "weft_actors", "--data", str(data), *COMMANDS[command])
    _refused(done)
    assert list(data.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.timeout(60)
def test_the_checker_on_a_path_without_a_store_creates_nothing(tmp_path):
    done = _run(tmp_path, "weft_actors.check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no weft_actors store at" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def _tables(server_url: str, url: str) -> list[str]:
    schema = url.rsplit("%3D", 1)[1]
    with psycopg.connect(server_url, autocommit=True) as conn:
        rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)).fetchall()
    return [row[0] for row in rows]


@pytest.mark.timeout(120)
def test_commands_on_an_empty_postgres_schema_create_no_tables(tmp_path, postgres_url, schema_url):
    for command in ("purge-status", "purge-id", "export", "replay"):
        done = _run(tmp_path, "weft_actors", "--data", schema_url, *COMMANDS[command])
        _refused(done)
        assert _tables(postgres_url, schema_url) == [], command
    done = _run(tmp_path, "weft_actors.check", "--data", schema_url)
    assert done.returncode == 2 and "no weft_actors store at" in done.stderr, done.stderr
    assert _tables(postgres_url, schema_url) == []
    assert list(tmp_path.iterdir()) == []
