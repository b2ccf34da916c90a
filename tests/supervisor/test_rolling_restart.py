"""``python -m weft_actors shards restart`` and ``SIGHUP`` replace every shard of a real
supervisor one at a time (``supervisor._roll``): under a steady load of starts no request
fails, every workflow completes exactly once, and no activity attempt runs twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from _steady_load import SteadyStarts
from weft_actors import Client
from weft_actors.errors import InvalidRequest, RollInProgress

pytestmark = pytest.mark.timeout(150)

HELD = 4
CHARGE_SECONDS = 1.5


def _cli(sup: RunningSupervisor, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, *args], capture_output=True, text=True, env=sup.env, timeout=timeout
    )


def _pids(client: Client) -> list[int]:
    return [shard["pid"] for shard in client.shards("list")["shards"]]


def test_shards_restart_replaces_every_shard_under_load_with_no_failed_request(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    held = [f"held{i}" for i in range(HELD)]
    with RunningSupervisor(tmp_path / "data", shards=3, app="roll_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        with Client(sup.endpoint, timeout=30) as client:
            before = _pids(client)
            for tag in held:
                client.start("charge_then_wait", tag, CHARGE_SECONDS, id=tag)
            wait_until(lambda: len(list(runs.glob("held*.start.*"))) == HELD, 20, "every held charge running")
            with SteadyStarts(sup.endpoint, rate=40) as load:
                time.sleep(0.5)  # some load before the roll
                done = _cli(sup, "shards", "restart")
                time.sleep(0.5)  # and some after it
            assert done.returncode == 0, (done.stdout, done.stderr, sup.log_text()[-3000:])
            assert "rolling restart completed" in done.stdout and "3 shards replaced" in done.stdout, done.stdout
            listing = client.shards("list")
            after = [shard["pid"] for shard in listing["shards"]]
            assert not set(after) & set(before), (before, after)
            assert {shard["state"] for shard in listing["shards"]} == {"serving"}, listing
            assert listing["roll"]["last"]["outcome"] == "completed" and listing["roll"]["phase"] == "idle"
            assert load.failures == [], load.failures[:5]
            assert len(load.started) > 20
            for tag in held:
                client.get_handle(tag).signal("go", tag)
            for tag in held:
                assert client.get_handle(tag).result(timeout=30) == [f"charged {tag}", tag]
            for tag in load.started:
                assert client.get_handle(tag).result(timeout=30) == [f"charged {tag}-a", f"charged {tag}-b"]
        log = sup.log_text()
        for index in range(3):
            assert f"rolling restart: shard {index} replaced" in log, log[-3000:]
        assert "exited with code" not in log
    # Every activity ran exactly once: the draining shards let their attempts finish.
    for tag in held + [f"{t}-{s}" for t in load.started for s in "ab"]:
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag


def test_sighup_rolls_and_a_second_restart_meanwhile_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunningSupervisor(tmp_path / "data", shards=2, app="roll_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        with Client(sup.endpoint, timeout=30) as client:
            with pytest.raises(InvalidRequest, match="unknown shards action 'explode'"):
                client.shards("explode")
            before = _pids(client)
            client.start("charge_then_wait", "slow", 2.0, id="slow")  # keeps a handoff's grace busy
            wait_until(lambda: list(runs.glob("slow.start.*")), 20, "the charge running")
            os.kill(sup.process.pid, signal.SIGHUP)
            wait_until(lambda: client.shards("list")["roll"]["phase"] != "idle", 10, "the roll begun")
            with pytest.raises(RollInProgress, match="running already"):
                client.shards("restart")
            refused = _cli(sup, "shards", "restart")
            assert refused.returncode == 1 and "roll_in_progress" in refused.stderr, refused
            last = wait_until(lambda: client.shards("list")["roll"]["last"], 60, "the roll ended")
            assert last["outcome"] == "completed" and last["source"] == "SIGHUP", last
            assert not set(_pids(client)) & set(before)
            listed = _cli(sup, "shards", "list")
            assert listed.returncode == 0 and "serving" in listed.stdout and "last (SIGHUP): completed" in listed.stdout, listed
            client.get_handle("slow").signal("go", 1)
            assert client.get_handle("slow").result(timeout=30) == ["charged slow", 1]
    assert len(list(runs.glob("slow.start.*"))) == 1


def test_a_single_shard_roll_is_refused_with_a_reason(tmp_path: Path) -> None:
    with RunningSupervisor(tmp_path / "data", shards=1, app="roll_app", env={"WEFT_TEST_RUNS": str(tmp_path)}) as sup:
        with Client(sup.endpoint, timeout=30) as client:
            before = _pids(client)
            done = _cli(sup, "shards", "restart")
            assert done.returncode == 1 and "roll_failed" in done.stderr and "at least 2 shards" in done.stderr, done
            assert _pids(client) == before
