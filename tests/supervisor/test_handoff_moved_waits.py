"""A call waiting on a shard that hands its workflows off keeps waiting (``WorkflowMoved``):
an ``execute`` whose start is committed, with or without a fixed id, and a ``result``, are
answered by the successor; no start is applied twice and no activity runs twice."""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(120)

EXECUTES = 8
CHARGE_SECONDS = 1.5
NAP_SECONDS = 2.0


def test_executes_waiting_on_a_draining_shard_are_answered_by_the_successor(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    tags = [f"x{i}" for i in range(EXECUTES)]
    results: dict[str, object] = {}

    def execute(tag: str, fixed_id: bool) -> None:
        options: dict[str, Any] = {"id": tag} if fixed_id else {}
        try:
            with Client(sup.endpoint, timeout=60) as client:
                results[tag] = client.execute("charge_then_nap", tag, CHARGE_SECONDS, NAP_SECONDS, timeout=50, **options)
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            results[tag] = exc

    def wait_result(tag: str) -> None:
        with Client(sup.endpoint, timeout=60) as client:
            try:
                results["result " + tag] = client.get_handle(tag).result(timeout=50)
            except Exception as exc:  # noqa: BLE001
                results["result " + tag] = exc

    with RunningSupervisor(tmp_path / "data", shards=2, app="handoff_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        # Half with a fixed id (default if_exists: not resendable as it is), half without.
        callers = [threading.Thread(target=execute, args=(tag, i % 2 == 0), daemon=True) for i, tag in enumerate(tags)]
        for thread in callers:
            thread.start()
        wait_until(lambda: len(list(runs.glob("*.start.*"))) == EXECUTES, 20, "every charge running")
        waiters = [threading.Thread(target=wait_result, args=(tag,), daemon=True) for tag in tags[::2]]
        for thread in waiters:
            thread.start()
        os.kill(sup.process.pid, signal.SIGUSR1)
        handed = wait_until(lambda: next((line for line in sup.stderr_lines if "workflows to" in line and " handed " in line), None), 30, "the handoff logged")
        match = re.search(r"handed (\d+) workflows to \w+ \(0 released\)", handed)
        assert match is not None and int(match.group(1)) > 0, handed  # some executes waited on the draining shard
        for thread in callers + waiters:
            thread.join(60)
        with Client(sup.endpoint, timeout=30) as client:
            listed = client.list(type="charge_then_nap", limit=100)["items"]
    assert results == {**{tag: f"charged {tag}" for tag in tags}, **{"result " + tag: f"charged {tag}" for tag in tags[::2]}}, results
    assert len(listed) == EXECUTES  # no start applied twice
    for tag in tags:  # each charge ran once: the draining shard let its attempts finish
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag
