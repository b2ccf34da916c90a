"""A deploy whose changed workflow no longer replays a running one is refused by ``shards
restart`` before any shard is replaced, naming the workflow and the op; the old shards go
on serving it (``supervisor._deploy_check``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)

APP = '''
from weft_actors import activity, workflow


@activity
async def {name}(tag: str) -> str:
    return "did " + tag


@workflow
async def deployable(ctx, tag: str) -> list:
    done = await ctx.run({name}, tag)
    return [done, await ctx.wait_signal("go")]
'''


def test_shards_restart_refuses_a_deploy_that_does_not_replay(tmp_path: Path, either_store: str) -> None:
    code = tmp_path / "code"
    code.mkdir()
    module = code / "deploy_app.py"
    module.write_text(APP.format(name="reserve"))
    env = {"PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])}
    sup = RunningSupervisor(either_store, shards=2, app="deploy_app")
    sup.env["PYTHONPATH"] = os.pathsep.join([str(code), sup.env["PYTHONPATH"]])
    with sup:
        with Client(sup.endpoint, timeout=30) as client:
            client.start("deployable", "t1", id="wf-kept")
            wait_until(lambda: "'kind': 'signal'" in str(client.get_handle("wf-kept").describe().get("stack")), 20, "waiting for its signal")
            before = [shard["pid"] for shard in client.shards("list")["shards"]]
            module.write_text(APP.format(name="reserve_seat_instead"))  # the deploy: a different activity
            done = subprocess.run(
                [sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, "shards", "restart"],
                capture_output=True, text=True, env={**os.environ, **env}, timeout=60,
            )
            assert done.returncode == 1, (done.stdout, done.stderr)
            assert "roll_failed" in done.stderr and "'wf-kept'" in done.stderr, done.stderr
            assert "reserve" in done.stderr and "reserve_seat_instead" in done.stderr, done.stderr
            listing = client.shards("list")
            assert [shard["pid"] for shard in listing["shards"]] == before  # no shard replaced
            assert listing["roll"]["last"]["outcome"] == "refused" and listing["roll"]["last"]["replaced"] == []
            assert {shard["state"] for shard in listing["shards"]} == {"serving"}
            module.write_text("def broken(:\n")  # a deploy that does not even import
            number = client.shards("restart")["roll"]
            last = wait_until(lambda: (client.shards("list")["roll"]["last"] or {}).get("roll") == number and client.shards("list")["roll"]["last"], 30, "refused")
            assert last["outcome"] == "refused" and "SyntaxError" in last["message"] and last["replaced"] == [], last
            assert [shard["pid"] for shard in client.shards("list")["shards"]] == before
            client.get_handle("wf-kept").signal("go", 7)  # the old shards still serve it
            assert client.get_handle("wf-kept").result(timeout=30) == ["did t1", 7]
        assert "does not replay on the new code" in sup.log_text()
