"""A real supervisor hands one shard's workflows to another on ``SIGUSR1`` (``_handoffs``):
the activity attempts running on the draining shard finish there and are not run again,
``result()`` calls waiting meanwhile are answered, and every workflow finishes on the
successor."""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(120)

WORKFLOWS = 8
CHARGE_SECONDS = 2.0


def test_sigusr1_hands_a_shard_off_without_running_an_activity_twice(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    tags = [f"h{i}" for i in range(WORKFLOWS)]
    with RunningSupervisor(tmp_path / "data", shards=2, app="handoff_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        with Client(sup.endpoint, timeout=30) as client:
            for tag in tags:
                client.start("charge_then_wait", tag, CHARGE_SECONDS, id=tag)
            owners = {tag: wait_until(lambda tag=tag: client.get_handle(tag).describe().get("owner"), 20, "owned") for tag in tags}
        wait_until(lambda: len(list(runs.glob("*.start.*"))) == WORKFLOWS, 20, "every charge running")
        results: dict[str, object] = {}

        def wait_result(tag: str) -> None:
            with Client(sup.endpoint, timeout=60) as waiting:
                try:
                    results[tag] = waiting.get_handle(tag).result(timeout=50)
                except Exception as exc:  # noqa: BLE001 - the assertion below names it
                    results[tag] = exc

        waiters = [threading.Thread(target=wait_result, args=(tag,), daemon=True) for tag in tags]
        for thread in waiters:
            thread.start()
        os.kill(sup.process.pid, signal.SIGUSR1)
        handed = wait_until(lambda: next((line for line in sup.stderr_lines if "workflows to" in line and " handed " in line), None), 30, "the handoff logged")
        assert "hands off to shard 1" in "".join(sup.stderr_lines), sup.stderr_lines[-20:]
        match = re.search(r"engine (\w+) handed (\d+) workflows to (\w+) \(0 released\)", handed)
        assert match is not None, handed
        draining, successor = match.group(1), match.group(3)
        moved = sorted(tag for tag, owner in owners.items() if _engine(owner) == draining)
        assert moved and int(match.group(2)) == len(moved), (handed, owners)
        with Client(sup.endpoint, timeout=30) as client:  # held by the successor now, before any signal
            assert {_engine(client.get_handle(tag).describe().get("owner")) for tag in moved} == {successor}
        with Client(sup.endpoint, timeout=30) as client:
            for tag in tags:
                client.get_handle(tag).signal("go", tag)
        for thread in waiters:
            thread.join(60)
        # The drained shard exited 0 and was started again at once: no crash, no backoff.
        wait_until(lambda: any("handed its workflows off and exited; starting it again" in line for line in sup.stderr_lines), 20, "the planned exit logged")
        wait_until(lambda: sum("ready (engine" in line for line in sup.stderr_lines) >= 3, 20, "the drained shard ready again")
        assert not any("exited with code" in line for line in sup.stderr_lines), [line for line in sup.stderr_lines if "exited with code" in line]
    assert results == {tag: [f"charged {tag}", tag] for tag in tags}, results
    for tag in tags:  # each charge ran once: the draining shard let its attempts finish
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag
    assert len(list(runs.glob("*.end.*"))) == WORKFLOWS


def _engine(owner: object) -> object:
    return owner.get("engine_id") if isinstance(owner, dict) else owner
