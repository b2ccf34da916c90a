"""A schedule answers its operators within a second whatever it is doing, under a real
supervisor: a backfill of a thousand fire times is started in turns, and between turns the
run reads its inbox, so ``pause``, ``update``, ``unpause``, ``delete`` (and ``describe``)
are answered at once instead of after the burst. An interval below a second is refused."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.errors import InvalidRequest

pytestmark = pytest.mark.timeout(120)


def _timed(call: Callable[[], Any]) -> float:
    began = time.monotonic()
    call()
    return time.monotonic() - began


def test_control_calls_are_answered_within_a_second_during_a_backfill_burst(tmp_path):
    with RunningSupervisor(tmp_path / "data", shards=2) as sup, Client(sup.endpoint, timeout=10) as client:
        for every in (1e-9, 0.001):  # once: a shard's loop held forever, or ~120 starts a second
            with pytest.raises(InvalidRequest, match="every= must be from 1 second"):
                client.create_schedule("fast", "hello", "x", spec={"every": every}, overlap="allow_all")
        schedule = client.create_schedule("busy", "hello", "x", spec=1, overlap="allow_all")
        wait_until(lambda: schedule.describe()["fired"] >= 1, timeout=30, what="a first fire")
        now = time.time()
        schedule.backfill(now - 999, now - 1)  # fire times the interval never had: ~1000 starts
        wait_until(lambda: schedule.describe()["skipped"] + schedule.describe()["fired"] >= 20, timeout=30, what="the backfill under way")
        took = {
            "describe": _timed(schedule.describe),
            "pause": _timed(lambda: schedule.pause("hold")),
            "update": _timed(lambda: schedule.update(args=["y"])),
            "unpause": _timed(schedule.unpause),
            "delete": _timed(schedule.delete),
        }
        assert all(seconds < 1.0 for seconds in took.values()), took
        summary = client.get_handle("busy").result(timeout=30)
        assert summary["deleted"] and summary["fired"] < 990  # deleted mid-burst, not after it
