"""The in-process benches still run and print the JSON line their README describes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def _json_line(*argv: str) -> dict:
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    return json.loads(lines[0])


@pytest.mark.parametrize("call", ["execute", "start-result"])
def test_engine_throughput_prints_its_json_line(call):
    result = _json_line(os.path.join(BENCH, "engine_throughput.py"), "--workflows", "300", "--call", call)
    assert result["workflows"] == 300 and result["call"] == call
    assert result["workflows_per_s"] > 0 and result["steps"] == 3
    # Group commit: the start and three steps of 300 workflows in far fewer transactions.
    assert result["writes_per_commit"] >= 50


def test_store_floor_prints_its_json_line():
    result = _json_line(os.path.join(BENCH, "store_floor.py"), "--workflows", "300")
    assert result["workflows"] == 300
    assert result["floor_us_per_workflow"] == pytest.approx(result["create_us"] + result["outcomes_us"] + result["finish_us"], abs=0.1)


def test_engine_ceiling_prints_its_json_line():
    result = _json_line(os.path.join(BENCH, "engine_ceiling.py"), "--workflows", "300")
    assert result["workflows"] == 300 and result["workflows_per_s"] > 0
    assert result["commits"] <= 40  # group commit: the start and three steps of 300 workflows


@pytest.mark.timeout(120)
def test_shared_store_prints_a_json_line_per_way():
    """One engine alone, then two on stores of their own, then two on one store, timed together."""
    done = subprocess.run(
        [sys.executable, os.path.join(BENCH, "shared_store.py"), "--workflows", "300", "--in-flight", "50"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [result["way"] for result in results] == ["alone", "separate", "shared"]
    assert [result["engines"] for result in results] == [1, 2, 2]
    for result in results:
        assert result["workflows"] == 300 * result["engines"] and result["workflows_per_s"] > 0
        assert len(result["per_engine"]) == result["engines"]
        # Group commit in each engine: the start and three steps of 300 workflows, 50 at a time.
        assert all(engine["writes_per_commit"] >= 25 for engine in result["per_engine"])
    assert results[0]["vs_alone"] == 1.0


@pytest.mark.timeout(120)
def test_activity_rate_prints_its_json_line():
    """A supervisor with two shards and a 50/s activity: 60 attempts, shared by both."""
    result = _json_line(os.path.join(BENCH, "activity_rate.py"), "--workflows", "60")
    assert result["workflows"] == 60 and result["shards"] == 2
    assert sum(result["starts_by_shard"]) == 60
    assert result["seconds"] >= 59 / 50 - 0.05  # the limit held: 60 starts take 1.18 s at least


@pytest.mark.timeout(120)
def test_flow_queue_prints_its_json_line():
    result = _json_line(os.path.join(BENCH, "flow_queue.py"), "--workflows", "100")
    assert result["workflows"] == 100 and result["concurrency"] == 8 and result["workflows_per_s"] > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("call", ["execute", "execute-many"])
def test_throughput_prints_cpu_per_role_next_to_the_in_process_engine(call):
    """A real supervisor with two shards: CPU per workflow of the front door, each shard and the
    client, the same workflows on an in-process engine in the same run, and the goal's ratios."""
    result = _json_line(os.path.join(BENCH, "throughput.py"), "--workflows", "1000", "--shards", "2", "--call", call, "--no-wait-quiet")
    assert result["workflows"] == 1000 and result["call"] == call and result["workflows_per_s"] > 0
    roles = result["cpu_us_per_workflow_by_role"]
    # /proc counts CPU in 10 ms ticks: a small run may show none for the front door.
    assert len(roles["shards"]) == 2 and sum(roles["shards"]) > 0 and roles["front_door"] >= 0 and roles["client"] > 0
    assert roles["server"] == pytest.approx(roles["front_door"] + sum(roles["shards"]), abs=0.5)
    assert roles["server"] == pytest.approx(result["cpu_us_per_workflow"]["engine"], abs=0.5)  # the old field stays
    inside = result["in_process"]
    assert inside["workflows_per_s"] > 0 and inside["cpu_us_per_workflow"] > 0
    ratios = result["vs_in_process"]
    assert ratios["server_cpu"] == pytest.approx(roles["server"] / inside["cpu_us_per_workflow"], abs=0.01)
    assert ratios["workflows_per_s"] == pytest.approx(result["workflows_per_s"] / inside["workflows_per_s"], abs=0.01)


@pytest.mark.timeout(120)
def test_throughput_times_a_client_from_connected_to_its_last_answer():
    """The one-off setup of a client (the directory, the shard connections) is no part of the
    timed window, as the in-process engine's open is not: the client connects with one
    uncounted workflow first, and the window closes at the last answer, before the close."""
    import time

    sys.path.insert(0, BENCH)
    try:
        import uvloop
        from _harness import Supervisor
        from throughput import Window, drive
    finally:
        sys.path.remove(BENCH)
    from weft_actors import Client

    class Gate:  # the start line: by now the directory was asked for, the shards reached
        def __init__(self, endpoint: str) -> None:
            self.endpoint = endpoint
            self.before = self.front_door_requests()
            self.directory_asked = False
            self.at = 0.0

        def front_door_requests(self) -> int:
            with Client(self.endpoint, timeout=10) as client:
                return int(client.stats()["supervisor"]["frontdoor_requests"])

        def wait(self) -> None:  # the directory and this stats call, at least
            self.directory_asked = self.front_door_requests() >= self.before + 2
            self.at = time.perf_counter()

    with Supervisor(shards=2) as supervisor:
        window, gate = Window(), Gate(supervisor.endpoint)
        began = time.perf_counter()
        latencies = uvloop.run(drive(supervisor.endpoint, 0, 200, 50, 3, window=window, go=gate))
        after_close = time.perf_counter()
    assert len(latencies) == 200 and gate.directory_asked
    assert began < gate.at <= window.started < window.ended <= after_close
    assert window.seconds >= max(latencies) and window.cpu > 0
