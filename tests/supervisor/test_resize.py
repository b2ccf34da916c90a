"""``python -m weft_actors shards restart``, then ``shards set 1`` and ``shards set 3`` on a
real supervisor under a steady load of starts (``supervisor._roll``, ``_resize``): no request
fails, a start's latency stays bounded, every workflow completes exactly once, no activity
attempt runs twice; new shards take new workflows; a bad N is refused."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from _steady_load import SteadyStarts
from weft_actors import Client
from weft_actors.errors import InvalidRequest

pytestmark = pytest.mark.timeout(150)


def _cli(sup: RunningSupervisor, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, *args], capture_output=True, text=True, env=sup.env, timeout=90)


def test_shards_set_shrinks_and_grows_under_load_with_no_failed_request(tmp_path: Path, either_store: str) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunningSupervisor(either_store, shards=3, app="roll_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        with Client(sup.endpoint, timeout=30) as client:
            for bad in (0, -1, 100_000):
                with pytest.raises(InvalidRequest, match="shards set needs a number of shards from 1 to 256"):
                    client.shards("set", bad)
            with pytest.raises(InvalidRequest, match="shards set needs"):
                client.shards("set")
            client.start("charge_then_wait", "held", 1.5, id="held")
            wait_until(lambda: list(runs.glob("held.start.*")), 20, "the held charge running")
            with SteadyStarts(sup.endpoint, rate=40) as load:
                time.sleep(1.0)
                before = len(load.latencies)
                rolled = _cli(sup, "shards", "restart")
                assert rolled.returncode == 0 and "3 shards replaced" in rolled.stdout, (rolled, sup.log_text()[-3000:])
                shrunk = _cli(sup, "shards", "set", "1")
                assert shrunk.returncode == 0 and "3 -> 1 shards (2 removed)" in shrunk.stdout, (shrunk, sup.log_text()[-3000:])
                listing = client.shards("list")
                assert [(shard["slot"], shard["state"]) for shard in listing["shards"]] == [(0, "serving")], listing
                grown = _cli(sup, "shards", "set", "3")
                assert grown.returncode == 0 and "1 -> 3 shards (2 added)" in grown.stdout, (grown, sup.log_text()[-3000:])
                during = len(load.latencies)
                time.sleep(1.5)  # new starts after the growth
            listing = client.shards("list")
            assert [(shard["slot"], shard["state"]) for shard in listing["shards"]] == [(0, "serving"), (1, "serving"), (2, "serving")]
            new_engines = {shard["engine_id"] for shard in listing["shards"][1:]}
            assert load.failures == [], load.failures[:5]
            # A start's latency stays bounded through the restart, the shrink and the growth.
            steady, changing = sorted(load.latencies[:before]), sorted(load.latencies[before:during])
            p99 = changing[int(len(changing) * 0.99)]
            print(f"start latency p50/p99 before {steady[len(steady) // 2]:.4f}/{steady[-1]:.4f}s, during {changing[len(changing) // 2]:.4f}/{p99:.4f}s (max {changing[-1]:.4f}s, {len(changing)} starts)")
            assert p99 < 1.0, changing[-10:]
            client.get_handle("held").signal("go", 1)
            assert client.get_handle("held").result(timeout=30) == ["charged held", 1]
            for tag in load.started:
                assert client.get_handle(tag).result(timeout=30) == [f"charged {tag}-a", f"charged {tag}-b"]
            # The added shards took their share of the new workflows (rendezvous over the live engines).
            wait_until(lambda: all(shard.get("activities_started", 0) > 0 for shard in client.stats()["shards"] if shard.get("engine_id") in new_engines), 10, "the added shards ran activities")
        assert "exited with code" not in sup.log_text()
    assert len(list(runs.glob("held.start.*"))) == 1
    for tag in [f"{t}-{s}" for t in load.started for s in "ab"]:
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag
