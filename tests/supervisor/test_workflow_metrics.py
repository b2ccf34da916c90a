"""``/metrics`` of a real supervisor: the store's workflows by type and status, and the shards'
timer gauges back at the live timers (and the timer heap within them) once 50 workflows with a
timer have finished, whether the timer was cancelled or fired."""

from __future__ import annotations

import re
import urllib.request

import pytest

from _processes import RunningSupervisor, free_port, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(120)

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``(name, labels) -> value`` of every sample on ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, line
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        samples[(match["name"], labels)] = float(match["value"])
    return samples


def per_shard(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str) -> dict[str, float]:
    return {dict(labels)["slot"]: value for (metric, labels), value in samples.items() if metric == name}


def workflows(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], wf_type: str) -> dict[str, float]:
    return {dict(labels)["status"]: value for (metric, labels), value in samples.items() if metric == "weft_workflows" and dict(labels)["type"] == wf_type}


def test_workflow_counts_by_type_and_status_and_timer_gauges_back_at_the_live_timers(tmp_path):
    port = free_port()
    args = ("--heartbeat", "0.2", "--ttl", "0.6", "--metrics-port", str(port))
    with RunningSupervisor(tmp_path / "data", shards=2, app="timers_app", args=args) as sup, Client(sup.endpoint, timeout=10) as client:
        client.start("napper", 3600.0, id="napping")  # the one timer that stays armed
        cancelled = [client.start("timed_wait", 3600.0, id=f"cancelled-{i}") for i in range(25)]
        fired = [client.start("timed_wait", 0.2, id=f"fired-{i}") for i in range(25)]
        for handle in cancelled:
            handle.signal("go", handle.id)
        assert [handle.result(timeout=20) for handle in cancelled] == [handle.id for handle in cancelled]
        assert [handle.result(timeout=20) for handle in fired] == ["timed out"] * 25

        def settled() -> dict | None:
            samples = scrape(port)
            timers, entries = per_shard(samples, "weft_shard_timers"), per_shard(samples, "weft_shard_timer_entries")
            if len(timers) == 2 and sum(timers.values()) == 1 and len(entries) == 2:
                return samples
            return None

        samples = wait_until(settled, timeout=20, what="the timers gauge back at the one live timer", interval=0.2)
        # The heap holds the live timers and at most COMPACT_MIN cancelled entries (no callback,
        # no actor) until they are due: never one per finished workflow.
        entries, timers = per_shard(samples, "weft_shard_timer_entries"), per_shard(samples, "weft_shard_timers")
        assert all(entries[slot] <= timers[slot] + 64 for slot in entries), entries
        assert workflows(samples, "timed_wait") == {
            "pending": 0, "running": 0, "completed": 50, "failed": 0, "cancelled": 0, "terminated": 0, "timed_out": 0, "continued": 0, "quarantined": 0, "stuck": 0,
        }
        assert workflows(samples, "napper")["running"] == 1 and workflows(samples, "napper")["completed"] == 0
        client.get_handle("napping").terminate("done")
        wait_until(lambda: workflows(scrape(port), "napper")["terminated"] == 1, timeout=10, what="the terminate counted")
        assert workflows(scrape(port), "napper")["running"] == 0  # an emptied status keeps its series, at 0
        assert all(0 <= lag < 1000 for lag in per_shard(scrape(port), "weft_shard_loop_lag_ms").values())
