"""Schedules under a real supervisor: the owner of a cron schedule is killed with SIGKILL,
twice, and each fire time still starts exactly one workflow; the CLI creates and drives one."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.cli import main as cli_main

pytestmark = pytest.mark.timeout(120)


def _fired_ids(client: Client, schedule_id: str) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = client.list(type="hello", limit=1000, cursor=cursor)
        ids.extend(item["id"] for item in page["items"] if item["id"].startswith(schedule_id + "/"))
        cursor = page["cursor"]
        if cursor is None:
            return sorted(ids)


def _fire_time(wid: str) -> dt.datetime:
    return dt.datetime.strptime(wid.split("/", 1)[1], "%Y-%m-%dT%H:%M:%S.%fZ")


def test_each_fire_time_of_a_cron_schedule_starts_one_workflow_across_kill_9_of_its_owner(tmp_path):
    with RunningSupervisor(tmp_path / "data", shards=2) as sup, Client(sup.endpoint, timeout=10) as client:
        schedule = client.create_schedule("every-second", "hello", "x", spec="* * * * * *")  # cron, with seconds
        owners = []
        for kill in range(1, 3):
            wait_until(lambda: schedule.describe()["fired"] >= 3 * kill, timeout=30, what=f"{3 * kill} fires")
            owner = client.get_handle("every-second").describe()["owner_shard"]["pid"]
            owners.append(owner)
            os.kill(owner, signal.SIGKILL)
        wait_until(lambda: schedule.describe()["fired"] >= 9, timeout=30, what="9 fires")
        schedule.delete()
        summary = client.get_handle("every-second").result(timeout=30)
        ids = _fired_ids(client, "every-second")
        assert len(ids) == summary["fired"] >= 9
        times = [_fire_time(wid) for wid in ids]
        gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
        assert gaps == [1.0] * len(gaps), gaps  # no fire time skipped, none started twice
        assert summary["missed"] == 0 and summary["skipped"] == 0
        assert all(client.get_handle(wid).result(timeout=30) == "Hello, x!" for wid in ids)


def test_the_command_line_creates_lists_and_drives_a_schedule(tmp_path, capsys):
    with RunningSupervisor(tmp_path / "data", shards=2) as sup, Client(sup.endpoint, timeout=10) as client:

        def cli(*args: str) -> str:
            assert cli_main(["--endpoint", sup.endpoint, *args]) == 0
            return capsys.readouterr().out

        assert "created" in cli("schedule", "create", "nightly", "hello", '["cli"]', "--cron", "0 3 * * *", "--timezone", "Europe/Paris", "--paused", "--note", "not yet")
        assert "nightly" in cli("schedule", "list")
        described = json.loads(cli("--json", "schedule", "describe", "nightly"))
        assert described["paused"] and described["note"] == "not yet" and described["spec"]["cron"] == "0 3 * * *"
        cli("schedule", "unpause", "nightly")
        assert json.loads(cli("--json", "schedule", "describe", "nightly"))["next_iso"][0].endswith(":00:00.000Z")
        cli("schedule", "trigger", "nightly")
        wait_until(lambda: client.get_schedule("nightly").describe()["fired"] == 1, timeout=30, what="the triggered fire")
        (wid,) = _fired_ids(client, "nightly")
        assert client.get_handle(wid).result(timeout=30) == "Hello, cli!"
        cli("schedule", "pause", "nightly", "--note", "maintenance")
        cli("schedule", "delete", "nightly")
        assert client.get_handle("nightly").result(timeout=30)["deleted"]
        assert cli_main(["--endpoint", sup.endpoint, "schedule", "create", "bad", "hello", "--cron", "61 * * * *"]) == 1
        assert "invalid_request" in capsys.readouterr().err
