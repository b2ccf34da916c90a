"""Flow control under a real supervisor with two shards: starts made through the client land on
either shard, count in one group, and queue in one FIFO; a kill -9 of a shard running one of
them neither loses the queue nor lets more than the limit run."""

from __future__ import annotations

import json
import os
import signal

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.cli import main as cli_main
from weft_actors.store import check_store

pytestmark = pytest.mark.timeout(120)


def _most_at_once(spans: list[list[float]]) -> int:
    """The most activity spans ``[n, start, end]`` that overlap at one instant."""
    edges = sorted([(start, 1) for _, start, _ in spans] + [(end, -1) for _, _, end in spans], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def test_ten_starts_for_one_key_run_two_at_a_time_in_fifo_order_across_shards_and_a_kill_9(tmp_path, capsys):
    with RunningSupervisor(tmp_path / "data", shards=2, app="flow_app") as sup, Client(sup.endpoint, timeout=10) as client:
        # The first two run long enough for the checks below to see them running, and the
        # third long enough to be killed mid-run; the rest are brief.
        seconds = [1.5, 1.5, 1.0] + [0.2] * 7
        ids = [client.start("order", "ann", n, seconds[n], id=f"ann-{n}").id for n in range(9)]
        assert cli_main(["--endpoint", sup.endpoint, "start", "order", '["ann", 9, 0.2]', "--id", "ann-9", "--priority", "0"]) == 0
        ids.append("ann-9")
        capsys.readouterr()
        described = client.get_handle("ann-9").describe()
        assert described["status"] == "pending" and described["queued"] and described["flow"]["position"] >= 7
        (flow,) = client.stats()["flow"]
        assert flow["type"] == "order" and flow["running"] == 2 and flow["queued"] >= 7
        wait_until(lambda: client.get_handle("ann-2").describe()["status"] == "running", timeout=30, what="the third start to run")
        victim = client.get_handle("ann-2").describe()["owner_shard"]["pid"]
        os.kill(victim, signal.SIGKILL)
        spans = [client.get_handle(wid).result(timeout=60) for wid in ids]
        assert [n for n, _, _ in spans] == list(range(10))
        assert _most_at_once(spans) <= 2
        # FIFO: each got its slot after the one before. The victim's activity ran again after
        # the takeover, so its own start says nothing of when it got its slot.
        by_start = [n for n, _, _ in sorted(spans, key=lambda span: span[1]) if n != 2]
        assert by_start == [n for n in range(10) if n != 2], "not FIFO"
        assert client.stats()["flow"] == []  # the counts of an emptied group go
        out = json.loads(_cli_json(sup.endpoint, capsys, "describe", "ann-9"))
        assert out["flow"] == {"key": "ann", "concurrency": 2, "priority": 0, "running": 0, "queued": False, "position": None}
    assert check_store(str(tmp_path / "data"), now=0.0) == []


def _cli_json(endpoint: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert cli_main(["--endpoint", endpoint, "--json", *args]) == 0
    return capsys.readouterr().out
