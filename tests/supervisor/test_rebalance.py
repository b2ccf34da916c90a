"""After ``shards set N`` grows a supervisor, the old shards hand the parked workflows the
new shards now prefer (rendezvous) to them, fenced, in bounded batches (``shard._rebalance``,
``supervisor._resize``): every workflow still completes exactly once, each activity ran once."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors._placement import preferred

pytestmark = pytest.mark.timeout(120)

PARKED = 60


def test_growth_moves_parked_workflows_to_the_new_shards(tmp_path: Path, either_store: str) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    tags = [f"p{i}" for i in range(PARKED)]
    with RunningSupervisor(either_store, shards=2, app="roll_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        with Client(sup.endpoint, timeout=30) as client:
            for tag in tags:
                client.start("charge_then_wait", tag, 0.01, id=tag)
            wait_until(lambda: len(list(runs.glob("*.end.*"))) == PARKED, 30, "every charge done: all parked")
            owner = lambda tag: (lambda o: o.get("engine_id") if isinstance(o, dict) else o)(client.get_handle(tag).describe().get("owner"))  # noqa: E731
            wait_until(lambda: all(owner(tag) for tag in tags), 20, "every workflow owned")
            old = {shard["engine_id"] for shard in client.shards("list")["shards"]}
            results: dict[str, object] = {}

            def wait_result(tag: str) -> None:  # waiting on the old shard while its workflow moves
                with Client(sup.endpoint, timeout=60) as waiting:
                    try:
                        results[tag] = waiting.get_handle(tag).result(timeout=50)
                    except Exception as exc:  # noqa: BLE001 - the assertion below names it
                        results[tag] = exc

            waiters = [threading.Thread(target=wait_result, args=(tag,), daemon=True) for tag in tags[:12]]
            for thread in waiters:
                thread.start()
            grown = subprocess.run([sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, "shards", "set", "4"], capture_output=True, text=True, env=sup.env, timeout=60)
            assert grown.returncode == 0, grown
            engines = [shard["engine_id"] for shard in client.shards("list")["shards"]]
            new = set(engines) - old
            expected = {tag for tag in tags if preferred(tag, engines) in new}
            assert expected & set(tags[:12])  # some of the waited-on workflows prefer a new engine
            wait_until(lambda: all(owner(tag) == preferred(tag, engines) for tag in expected), 30, "the parked workflows moved to their preferred new engines")
            assert all(owner(tag) in old for tag in set(tags) - expected)  # the others stayed
            for tag in tags:
                client.get_handle(tag).signal("go", tag)
            for tag in tags:
                assert client.get_handle(tag).result(timeout=30) == [f"charged {tag}", tag]
            for thread in waiters:
                thread.join(40)
            assert results == {tag: [f"charged {tag}", tag] for tag in tags[:12]}, results
        log = sup.log_text()
        assert "parked workflows to the engines that now prefer them" in log, log[-3000:]
        assert "exited with code" not in log
    for tag in tags:
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag
