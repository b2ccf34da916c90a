"""Operator commands: backup under load and restore, purge, replay."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from _processes import RunningSupervisor
from weft_actors import Client, Engine, activity, workflow
from weft_actors.admin import main as admin_main
from weft_actors.admin import parse_duration
from weft_actors.store import check_store

import pytest


def _cli(*args: str, env=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weft_actors", *args], capture_output=True, text=True, timeout=60, env=env)


def test_backup_taken_under_load_restores_and_finishes_every_running_workflow(tmp_path):
    data, copy = tmp_path / "data", tmp_path / "backup"
    with RunningSupervisor(data, app="supervisor_app") as sup, Client(sup.endpoint) as client:
        waiting = [client.start("waiter", f"t{i}", id=f"b-{i}") for i in range(20)]
        slow = [client.start("slow_steps", 5, 0.1, id=f"s-{i}") for i in range(20)]
        for h in waiting[:5]:
            h.signal("item", "before-backup")
        time.sleep(0.1)  # the slow ones are mid-activity while the copy is taken
        done = _cli("backup", str(copy), "--data", str(data), env=sup.env)
        assert done.returncode == 0, done.stderr
        for h in waiting:  # after the backup: not in the copy
            h.signal("item", "after-backup")
    assert check_store(str(copy), time.time()) == []
    # Restore: start a fresh supervisor on the copy.
    with RunningSupervisor(copy, app="supervisor_app") as sup, Client(sup.endpoint) as client:
        for i in range(20):
            client.get_handle(f"b-{i}").signal("item", None)
        for i in range(20):
            tag, items = client.get_handle(f"b-{i}").result(timeout=20)
            assert "after-backup" not in items
            assert items == (["before-backup"] if i < 5 else [])
        for i in range(20):
            assert client.get_handle(f"s-{i}").result(timeout=20) == [0, 1, 2, 3, 4]


@activity
async def noop(x: int) -> int:
    return x


@workflow
async def quick(ctx, x: int) -> int:
    return await ctx.run(noop, x)


@workflow
async def parked(ctx) -> str:
    return await ctx.wait_signal("never")


def _make_store(path: str) -> None:
    async def main() -> None:
        async with Engine(path, app=[quick, parked]) as engine:
            for i in range(5):
                await (await engine.start(quick, i, id=f"q-{i}")).result(timeout=5)
            await engine.start(parked, id="still-running")

    asyncio.run(main())


def test_purge_dry_run_changes_nothing_and_a_real_run_passes_the_checker(tmp_path, capsys):
    path = str(tmp_path / "data")
    _make_store(path)
    assert admin_main(["purge", "--status", "completed", "--data", path]) == 0
    assert "5 workflow(s) would be purged" in capsys.readouterr().out

    async def count() -> int:
        async with Engine(path, app=[quick, parked]) as engine:
            return len((await engine.list())["items"])

    assert asyncio.run(count()) == 6
    assert admin_main(["purge", "--status", "completed", "--older-than", "0s", "--yes", "--data", path]) == 0
    assert "5 workflow(s) purged" in capsys.readouterr().out
    assert check_store(path, time.time()) == []
    assert asyncio.run(count()) == 1
    # A running workflow is never purged, even by id.
    assert admin_main(["purge", "--id", "still-running", "--yes", "--data", path]) == 1
    assert "not purged still-running: invalid_request" in capsys.readouterr().out

    async def reuse() -> int:
        async with Engine(path, app=[quick, parked]) as engine:
            handle = await engine.start(quick, 7, id="q-0")  # a purged id is free again
            assert await handle.result(timeout=5) == 7
            return engine.store.get_epoch("q-0")

    assert asyncio.run(reuse()) >= 3  # created (1), purged (2), created again (3): never reset


def test_durations_parse():
    assert parse_duration("7d") == 7 * 86400 and parse_duration("90") == 90 and parse_duration("1.5h") == 5400
    with pytest.raises(ValueError):
        parse_duration("soon")


APP_V1 = '''
from weft_actors import activity, workflow

@activity
async def step(x):
    return x + 1

@workflow
async def flow(ctx, x):
    a = await ctx.run(step, x)
    return await ctx.wait_signal("go")
'''

APP_V2 = APP_V1.replace('a = await ctx.run(step, x)', 'await ctx.sleep(1)')


def test_replay_reports_a_divergence_for_changed_code_and_none_for_unchanged(tmp_path, monkeypatch, capsys):
    (tmp_path / "flows_v1.py").write_text(APP_V1)
    (tmp_path / "flows_v2.py").write_text(APP_V2)
    monkeypatch.syspath_prepend(str(tmp_path))
    import flows_v1  # noqa: E402

    path = str(tmp_path / "data")

    async def main() -> None:
        async with Engine(path, app=flows_v1) as engine:
            await engine.start("flow", 1, id="f")
            deadline = time.monotonic() + 5
            while "f" not in engine.actors or engine.actors["f"].run.waiting_signal() != "go":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)

    asyncio.run(main())
    assert admin_main(["replay", "f", "--app", "flows_v1", "--data", path]) == 0
    out = capsys.readouterr().out
    assert '"ok": true' in out and '"name": "go"' in out
    assert admin_main(["replay", "f", "--app", "flows_v2", "--data", path]) == 1
    out = capsys.readouterr().out
    assert '"ok": false' in out and "activity 'step'" in out and "sleep" in out
