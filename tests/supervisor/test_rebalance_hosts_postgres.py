"""A supervisor that joins a PostgreSQL store takes its share of the parked workflows
(``shard._membership``): host A's engines notice the new live engines at their maintenance
pass and hand over, fenced, the parked workflows whose preferred engine is now one of host
B's. Each workflow then completes exactly once, with its activity run once, whichever front
door its signal and its result request go through."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from _processes import RunningSupervisor, wait_until
from _two_hosts import TIMING, new_schema
from weft_actors import Client
from weft_actors._placement import preferred

pytestmark = pytest.mark.timeout(120)

WORKFLOWS = 40
MOVED = r"handed (\d+) parked workflows to the engines that now prefer them"


def owned(sup: RunningSupervisor) -> int:
    """Workflows the shards of ``sup`` own now (their ``claims_active``)."""
    with Client(sup.endpoint, timeout=10) as client:
        shards: list[dict[str, Any]] = client.stats()["shards"]
    return sum(int(shard.get("claims_active") or 0) for shard in shards)


def shard_list(sup: RunningSupervisor) -> list[dict[str, Any]]:
    with Client(sup.endpoint, timeout=10) as client:
        shards: list[dict[str, Any]] = client.shards("list")["shards"]
    return shards


def owner(client: Client, wid: str) -> Any:
    found = client.get_handle(wid).describe().get("owner")
    return found.get("engine_id") if isinstance(found, dict) else found


def test_a_joining_host_takes_its_share_of_parked_workflows(postgres_url: str, tmp_path: Path) -> None:
    url = new_schema(postgres_url)
    runs = tmp_path / "runs"
    runs.mkdir()
    env = {"WEFT_TEST_RUNS": str(runs)}
    tags = [f"p{i}" for i in range(WORKFLOWS)]
    busy = [f"r{i}" for i in range(4)]
    with RunningSupervisor(url, shards=2, app="handoff_app", args=TIMING, env=env) as host_a:
        with Client(host_a.endpoint, timeout=30) as client:
            for tag in tags:
                client.start("charge_then_wait", tag, 0.01, id=tag)
        wait_until(lambda: len(list(runs.glob("*.end.*"))) == WORKFLOWS, 20, "every charge done: all parked on a signal")
        wait_until(lambda: owned(host_a) == WORKFLOWS, 20, "host A's stats owning every workflow")
        with Client(host_a.endpoint, timeout=30) as client:  # running through the join: never moved
            for tag in busy:
                client.start("charge_then_nap", tag, 3.0, 0.01, id=tag)
        wait_until(lambda: len(list(runs.glob("r*.start.*"))) == len(busy), 20, "the long charges running")
        with RunningSupervisor(url, shards=2, app="handoff_app", args=TIMING, env=env) as host_b:
            # B runs as many shards as A: its share is about half (rendezvous over 4 engines)
            wait_until(lambda: owned(host_b) >= WORKFLOWS // 4, 20, "host B owning its share")
            for tag in busy:
                with Client(host_b.endpoint, timeout=30) as client:
                    assert client.get_handle(tag).result(timeout=30) == f"charged {tag}"
            wait_until(lambda: owned(host_a) + owned(host_b) == WORKFLOWS, 20, "every workflow owned once")
            engines = [shard["engine_id"] for sup in (host_a, host_b) for shard in shard_list(sup)]
            with Client(host_b.endpoint, timeout=30) as client:  # each on its preferred engine over both hosts
                wait_until(lambda: all(owner(client, tag) == preferred(tag, engines) for tag in tags), 20, "every parked workflow on its preferred engine")
            share_b = owned(host_b)
            assert WORKFLOWS // 4 <= share_b <= 3 * WORKFLOWS // 4, share_b
            moved = [int(n) for n in re.findall(MOVED, host_a.log_text())]
            assert sum(moved) >= share_b, (moved, share_b)  # B got them by A's rebalancing
            time.sleep(2.5)  # five more passes of the same membership: nothing moves again
            assert owned(host_b) == share_b
            assert [int(n) for n in re.findall(MOVED, host_a.log_text())] == moved
            assert re.findall(MOVED, host_b.log_text()) == []  # no workflow came back: no thrash
            doors = (host_a.endpoint, host_b.endpoint)
            for i, tag in enumerate(tags):  # a signal through one door, the result through the other
                with Client(doors[i % 2], timeout=30) as client:
                    client.get_handle(tag).signal("go", tag)
            for i, tag in enumerate(tags):
                with Client(doors[(i + 1) % 2], timeout=30) as client:
                    assert client.get_handle(tag).result(timeout=30) == [f"charged {tag}", tag]
            wait_until(lambda: owned(host_a) + owned(host_b) == 0, 20, "every workflow ended")
    for tag in tags + busy:  # moved parked, running ones stayed: no attempt ran again
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag
