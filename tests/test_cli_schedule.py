"""``python -m weft_actors schedule ...`` against a real supervisor: schedule columns (not the
workflow view beneath), a readable ``describe``, ISO 8601 times, errors that name the schedule."""

from __future__ import annotations

import json
from typing import Iterator

import pytest

from _processes import RunningSupervisor
from weft_actors.cli import main

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSupervisor]:
    with RunningSupervisor(tmp_path_factory.mktemp("cli-schedule") / "weft-data", shards=1) as running:
        yield running


def cli(supervisor: RunningSupervisor, *argv: str) -> int:
    return main(["--endpoint", supervisor.endpoint, "--timeout", "20", *argv])


def test_schedule_list_shows_schedule_columns(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    for sid in ("sl-active", "sl-paused", "sl-deleted"):
        assert cli(supervisor, "schedule", "create", sid, "hello", '["x"]', "--every", "3600") == 0
    assert cli(supervisor, "schedule", "pause", "sl-paused", "--note", "maintenance") == 0
    assert cli(supervisor, "schedule", "delete", "sl-deleted") == 0
    capsys.readouterr()
    assert cli(supervisor, "schedule", "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "WORKFLOW", "SPEC", "STATE", "NEXT", "FIRE", "LAST", "RUN"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "every 3600s" in rows["sl-active"] and " active " in rows["sl-active"]
    assert rows["sl-active"].split()[5].endswith("Z")  # the next fire, in ISO 8601
    assert " paused " in rows["sl-paused"] and " deleted " in rows["sl-deleted"]
    assert not [row for row in rows.values() if "running" in row.split() or "completed" in row.split()]
    assert cli(supervisor, "schedule", "list", "--json") == 0
    items = {item["id"]: item for item in json.loads(capsys.readouterr().out)["items"]}
    assert items["sl-paused"]["paused"] is True and items["sl-deleted"]["deleted"] is True


def test_schedule_describe_reads_as_a_page_and_json_stays(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "schedule", "create", "sd-1", "hello", '["x"]', "--every", "60", "--paused", "--note", "not yet") == 0
    capsys.readouterr()
    assert cli(supervisor, "schedule", "describe", "sd-1") == 0
    out = capsys.readouterr().out
    assert not out.lstrip().startswith("{"), out
    facts = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines() if len(line.split()) > 1 and not line.startswith(" ")}
    assert facts["spec"] == "every 60s" and facts["state"] == "paused (not yet)" and facts["workflow"] == "hello"
    assert cli(supervisor, "--json", "schedule", "describe", "sd-1") == 0
    described = json.loads(capsys.readouterr().out)
    assert described["id"] == "sd-1" and described["paused"] is True


def test_schedule_backfill_takes_iso_8601(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "schedule", "create", "sb-1", "hello", '["x"]', "--every", "3600", "--paused", "--start", "2025-12-31T00:00:00Z") == 0
    assert cli(supervisor, "schedule", "backfill", "sb-1", "2026-01-01T00:00:00Z", "2026-01-01T02:00:00+00:00") == 0
    capsys.readouterr()
    assert cli(supervisor, "--json", "schedule", "describe", "sb-1") == 0
    assert json.loads(capsys.readouterr().out)["spec"]["start"] == 1767139200.0
    assert cli(supervisor, "schedule", "backfill", "sb-1", "yesterday", "1") == 2
    assert "ISO 8601" in capsys.readouterr().err


def test_schedule_errors_name_the_schedule(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "schedule", "describe", "no-such") == 1
    assert capsys.readouterr().err == "error: workflow_not_found: schedule 'no-such' not found\n"
    assert cli(supervisor, "schedule", "pause", "no-such") == 1
    assert "schedule 'no-such' not found" in capsys.readouterr().err
    assert cli(supervisor, "schedule", "create", "se-5", "hello", '["x"]', "--every", "60") == 0
    assert cli(supervisor, "schedule", "create", "se-5", "hello", '["x"]', "--every", "60") == 1
    assert "schedule 'se-5' already exists" in capsys.readouterr().err
    assert cli(supervisor, "start", "sleeper", "[3600]", "--id", "se-wf") == 0
    capsys.readouterr()
    assert cli(supervisor, "schedule", "describe", "se-wf") == 1
    err = capsys.readouterr().err
    assert "schedule 'se-wf' not found" in err and "query handler" not in err
    assert cli(supervisor, "terminate", "se-wf") == 0
