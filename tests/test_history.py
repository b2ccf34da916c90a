"""A workflow's history exported to a file replays against code elsewhere, byte for byte:
``export``, ``replay --history`` and ``weft_actors.testing.replay_history``."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import time

import pytest

from weft_actors import Engine, activity, workflow
from weft_actors.admin import main as admin_main
from weft_actors.errors import InvalidRequest, NonDeterminismError, WorkflowNotFound
from weft_actors.history import dumps, export_history, loads
from weft_actors.store import LmdbStore
from weft_actors.testing import replay_history


@activity
async def quote(order: str) -> dict:
    return {"order": order, "at": dt.datetime(2026, 12, 1, 9, 30), "raw": b"\x00\xff", "n": 1.5}


@workflow
async def checkout(ctx, order: str) -> dict:
    priced = await ctx.run(quote, order)
    await ctx.sleep(0.01)
    approved = await ctx.wait_signal("approve")
    return {"priced": priced, "approved": approved}


@workflow(name="checkout")
async def checkout_v2(ctx, order: str) -> dict:  # a deploy that dropped the timer
    priced = await ctx.run(quote, order)
    approved = await ctx.wait_signal("approve")
    return {"priced": priced, "approved": approved}


def _recorded(path: str, finish: bool) -> None:
    async def main() -> None:
        async with Engine(path, app=[checkout]) as engine:
            handle = await engine.start(checkout, "o-1", id="c-1")
            deadline = time.monotonic() + 10
            while "c-1" not in engine.actors or engine.actors["c-1"].run.waiting_signal() != "approve":
                assert time.monotonic() < deadline, "never reached its signal"
                await asyncio.sleep(0.01)
            if finish:
                await handle.signal("approve", True)
                await handle.result(timeout=10)

    asyncio.run(main())


def test_an_exported_history_replays_like_the_store_it_came_from(tmp_path, capsys):
    data = str(tmp_path / "data")
    _recorded(data, finish=True)
    assert admin_main(["export", "c-1", "--data", data]) == 0
    text = capsys.readouterr().out
    document = json.loads(text)
    assert document["format"] == "weft-history" and [op["kind"] for op in document["ops"]] == ["activity", "sleep", "signal"]
    store = LmdbStore(data, readonly=True)
    try:
        stored = export_history(store, "c-1")
    finally:
        store.close()
    assert loads(text) == stored  # every byte of every payload survives the file
    history_file = tmp_path / "c-1.json"
    history_file.write_text(text)
    report = replay_history(history_file, [checkout])
    assert report["ok"] and report["next"] == "complete" and report["status"] == "completed"
    with pytest.raises(NonDeterminismError, match="sleep"):
        replay_history(str(history_file), [checkout_v2])


def test_the_command_replays_a_history_file_without_a_data_directory(tmp_path):
    data = str(tmp_path / "data")
    _recorded(data, finish=False)
    exported = subprocess.run([sys.executable, "-m", "weft_actors", "export", "c-1", "--data", data], capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    (tmp_path / "h.json").write_text(exported.stdout)
    app = tmp_path / "history_app.py"
    app.write_text(
        "from weft_actors import activity, workflow\n"
        "@activity\nasync def quote(order):\n    return order\n"
        "@workflow\nasync def checkout(ctx, order):\n"
        "    await ctx.run(quote, order)\n    await ctx.sleep(0.01)\n    return await ctx.wait_signal('approve')\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    replayed = subprocess.run(
        [sys.executable, "-m", "weft_actors", "replay", "--history", str(tmp_path / "h.json"), "--app", "history_app"],
        capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path),
    )
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["ok"] and report["next"] == {"seq": 2, "kind": "signal", "name": "approve"}


def test_what_is_not_a_history_is_refused_with_a_stable_code(tmp_path, capsys):
    for text, words in (
        ("not json", "not JSON"),
        ('{"format": "other"}', "no \"format\""),
        ('{"format": "weft-history", "version": 99}', "version 99"),
        ('{"format": "weft-history", "version": 1, "workflow_id": "x", "record": {}, "ops": []}', "no 'type'"),
        (dumps(loads(_minimal())).replace('"seq":0', '"seq":"zero"'), "integer"),
        (_minimal().replace('"kpE="', '42'), "base64 string"),
    ):
        with pytest.raises(InvalidRequest, match=words) as caught:
            loads(text)
        assert caught.value.code == "invalid_request"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert admin_main(["replay", "--history", str(bad), "--app", "weft_actors.examples"]) == 1
    assert "invalid_request" in capsys.readouterr().err
    assert admin_main(["replay", "--app", "weft_actors.examples"]) == 2  # neither an id nor a file
    with pytest.raises(WorkflowNotFound):
        store = LmdbStore(str(tmp_path / "empty"))
        try:
            export_history(store, "nobody")
        finally:
            store.close()


def _minimal() -> str:
    return json.dumps({
        "format": "weft-history", "version": 1, "workflow_id": "x",
        "record": {"type": "checkout", "run_id": "r", "status": "running", "args": {"$b64": "kpE="}},
        "ops": [{"seq": 0, "kind": "activity", "name": "quote", "t": 1, "ok": {"$b64": "kpE="}}],
    })
