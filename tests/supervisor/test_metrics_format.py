"""``/metrics`` is valid Prometheus text: every family has one HELP and one TYPE line before
its first sample, names are legal, and counters are typed as counters."""

from __future__ import annotations

import re

from weft_actors.supervisor._metrics import render

STATS = {
    "workflows": [
        {"type": "order", "status": "running", "count": 12},
        {"type": "order", "status": "completed", "count": 40},
        {"type": 'a "b" \\ c\nd', "status": "failed", "count": 1},
    ],
    "flow": [{"type": "payout", "running": 2, "queued": 7}],
    "supervisor": {"pid": 1, "uptime_s": 2.5, "restarts": 1, "hung_kills": 0, "frontdoor_requests": 10, "frontdoor_overloaded_total": 3, "frontdoor_start_latency_p50_ms": 1.5},
    "shards": [
        {"slot": 0, "pid": 2, "alive": True, "engine_id": "e0", "state": "running", "commits_total": 7, "live_actors": 3, "loop_lag_ms": 1.5, "timer_entries": 4, "claim_attempts_total": {"acquired": 2, "takeover": 1}, "reclaim_pass_seconds": {"last": 0.01, "max": 0.02}},
        {"slot": 1, "pid": 3, "alive": False, "engine_id": "e1", "commits_total": 0, "live_actors": 0},
    ],
}
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def test_every_family_has_help_and_type_before_its_samples() -> None:
    declared: dict[str, dict[str, str]] = {}
    for line in render(STATS).splitlines():
        if line.startswith("# "):
            what, name, text = line[2:].split(" ", 2)
            assert what in ("HELP", "TYPE") and NAME.fullmatch(name), line
            assert what not in declared.setdefault(name, {}), f"{what} twice for {name}"
            declared[name][what] = text
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        assert NAME.fullmatch(name), line
        assert set(declared.get(name, {})) == {"HELP", "TYPE"}, f"sample before HELP and TYPE: {line}"
        float(line.rsplit(" ", 1)[1])
    assert declared["weft_supervisor_restarts"]["TYPE"] == "counter"
    assert declared["weft_supervisor_uptime_s"]["TYPE"] == "gauge"
    assert declared["weft_shard_commits_total"]["TYPE"] == "counter"
    assert declared["weft_shard_live_actors"]["HELP"] == "Workflows in memory on the shard."
    assert all(text.strip() for family in declared.values() for text in family.values())


def test_workflows_by_type_and_status_have_a_series_for_every_status_of_a_type() -> None:
    lines = render(STATS).splitlines()
    assert "# TYPE weft_workflows gauge" in lines
    assert 'weft_workflows{type="order",status="running"} 12' in lines
    assert 'weft_workflows{type="order",status="completed"} 40' in lines
    assert 'weft_workflows{type="order",status="quarantined"} 0' in lines  # a status that empties keeps its series
    assert 'weft_workflows{type="order",status="stuck"} 0' in lines
    assert sum(line.startswith('weft_workflows{type="order",') for line in lines) == 10
    # A type is a user's string: quotes, backslashes and newlines are escaped in the label.
    assert r'weft_workflows{type="a \"b\" \\ c\nd",status="failed"} 1' in lines
    assert 'weft_shard_loop_lag_ms{slot="0"} 1.5' in lines and "# TYPE weft_shard_loop_lag_ms gauge" in lines
    assert 'weft_shard_timer_entries{slot="0"} 4' in lines


def test_flow_control_has_its_running_and_queued_per_type() -> None:
    lines = render(STATS).splitlines()
    assert 'weft_flow_running{type="payout"} 2' in lines and 'weft_flow_queued{type="payout"} 7' in lines
    assert "# TYPE weft_flow_queued gauge" in lines
