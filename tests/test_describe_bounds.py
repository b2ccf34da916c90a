"""``describe()`` stays bounded whatever the workflow holds (a real supervisor, real shards):
ten thousand awaited activities, a hundred retried ones with long failures, thousands of
timers, signals of a hundred kilobytes. Each list keeps its first (or newest) entries and says
how many it left out; the answer stays under the payload limit (a megabyte)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors._cli_stack import format_stack

pytestmark = pytest.mark.timeout(120)

LIMIT = 1 << 20


def _size(described: dict[str, Any]) -> int:
    return len(json.dumps(described, default=repr))


def _described_when(handle: Any, ready: Any, what: str) -> dict[str, Any]:
    """The first ``describe()`` answer ``ready`` accepts, polled with a deadline."""
    found: list[dict[str, Any]] = []

    def check() -> bool:
        found[:] = [handle.describe()]
        return bool(ready(found[0]))

    wait_until(check, timeout=60, what=what)
    return found[0]


def _supervisor(tmp_path: Path) -> RunningSupervisor:
    return RunningSupervisor(tmp_path / "data", shards=1, app="review_app")


def test_ten_thousand_pending_activities_are_listed_a_hundred_at_a_time(tmp_path: Path) -> None:
    with _supervisor(tmp_path) as sup, Client(sup.endpoint, timeout=60) as client:
        handle = client.start("many_activities", 10_000, id="wide-1")
        described = _described_when(handle, lambda d: d["pending_activities"], "pending activities")
        assert len(described["pending_activities"]) == 100 and described["pending_activities_omitted"] == 9_900
        assert [entry["seq"] for entry in described["pending_activities"]] == sorted(entry["seq"] for entry in described["pending_activities"])
        frame = described["stack"][-1]
        assert len(frame["waits_on"]) == 100 and frame["waits_on_omitted"] == 9_900
        assert _size(described) < LIMIT
        text = format_stack("wide-1", handle.stack())
        assert text.endswith("... and 9900 more ops") and text.count("activity 'long_call'") == 100


def test_long_failures_of_retried_activities_are_cut(tmp_path: Path) -> None:
    with _supervisor(tmp_path) as sup, Client(sup.endpoint, timeout=60) as client:
        handle = client.start("many_failing", 300, id="loud-1")

        def failed() -> dict[str, Any] | None:
            described = handle.describe()
            shown = described["pending_activities"]
            return described if len(shown) >= 100 and all(entry["last_failure"] for entry in shown) else None

        described = wait_until(failed, timeout=60, what="every shown activity failed once")
        assert described["pending_activities_omitted"] == 200
        for entry in described["pending_activities"]:
            failure = entry["last_failure"]
            assert failure["message"].startswith("x" * 1000) and re.fullmatch(r"x{1000}\.\.\.\[190\d\d characters cut\]", failure["message"])
            assert re.fullmatch(r"\[\d+ characters cut\]\.\.\.x+ failure \d+\n", failure["traceback"]) and len(failure["traceback"]) < 3100
        assert _size(described) < LIMIT


def test_thousands_of_timers_keep_the_newest_history_and_the_earliest_timers(tmp_path: Path) -> None:
    with _supervisor(tmp_path) as sup, Client(sup.endpoint, timeout=60) as client:
        handle = client.start("many_timers", 5_000, id="timers-1")
        described = _described_when(handle, lambda d: d.get("timers_omitted") == 4_000, "5000 timers")
        assert len(described["timers"]) == 1_000 and len(described["history"]) == 1_000
        assert described["history_omitted"] == 4_000
        seqs = [op["seq"] for op in described["history"]]
        assert seqs == list(range(4_000, 5_000))  # the newest ops
        assert _size(described) < LIMIT


def test_large_signal_payloads_are_sized_not_carried(tmp_path: Path) -> None:
    with _supervisor(tmp_path) as sup, Client(sup.endpoint, timeout=60) as client:
        handle = client.start("sink", id="sink-1")
        for n in range(12):
            handle.signal("s", "z" * 100_000 + str(n))
        handle.signal("s", "small")
        wait_until(lambda: handle.query("count") == 13, timeout=30, what="13 signals")
        described = handle.describe()
        signals = [op for op in described["history"] if op["kind"] == "signal"]
        assert [op["payload"] for op in signals][-1] == "small"
        big = [op for op in signals if op.get("payload_omitted")]
        assert len(big) == 12 and all(op["payload"] is None and op["payload_omitted"] > 100_000 for op in big)
        assert _size(described) < 64 * 1024
