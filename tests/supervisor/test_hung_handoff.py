"""A shard that hangs while it hands off is still watched (``_drain_watch``): killed as hung
once its grace and a ttl have passed without a heartbeat or a loop turn, and its workflows
go on elsewhere, as after any hang (the one whose code held the loop is blamed)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)

GRACE = 1.0
TIMING = ("--heartbeat", "0.5", "--ttl", "3", "--handoff-grace", str(GRACE))


def test_a_shard_hung_during_its_handoff_is_killed_after_the_grace_and_a_ttl(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunningSupervisor(tmp_path / "data", shards=2, app="handoff_app", args=TIMING, env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        shard0 = sup.shard_pids[0]
        with Client(sup.endpoint, timeout=30) as client:
            tag = 0
            # Start until one runs on shard 0, the first a SIGUSR1 hands off.
            while not list(runs.glob(f"*.hog.{shard0}")):
                client.start("hog_once", f"g{tag}", id=f"g{tag}")
                tag += 1
                assert tag < 40, "no workflow landed on shard 0"
                wait_until(lambda: len(list(runs.glob("*.hog.*"))) >= tag, 10, "the hog running")
            os.kill(sup.process.pid, signal.SIGUSR1)
            wait_until(lambda: "shard 0 hands off" in sup.log_text(), 10, "the handoff begun")
            (runs / f"block.{shard0}").touch()  # its loop blocks inside the grace: it hangs draining
            hung = wait_until(lambda: next((line for line in sup.stderr_lines if "is hung" in line), None), GRACE + 3 + 12, "the draining shard killed as hung")
            assert f"pid {shard0}" in hung, hung
            (runs / "go").touch()
            # Its workflows go on elsewhere, as after any hang: the one whose code held the loop
            # is quarantined for it (blame), every other one ends.
            (blocker,) = [path.name.split(".")[0] for path in runs.glob(f"*.hog.{shard0}")]
            for i in range(tag):
                handle = client.get_handle(f"g{i}")
                if f"g{i}" == blocker:
                    wait_until(lambda: handle.describe()["status"] == "quarantined", 20, "the blocker quarantined")
                else:
                    assert handle.result(timeout=30) == f"hogged g{i}"
