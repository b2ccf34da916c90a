"""``SIGTERM`` to one of two supervisors on one PostgreSQL drains to the other (``_leaving``):
its shards let their running activity attempts finish and hand their workflows to the other
host's shards, which drive them from the handoff's durable marks (no control pipe reaches
them). Every workflow finishes on the survivor with each activity run once, and a client of
the survivor sees no failed request meanwhile."""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from _two_hosts import TIMING, new_schema
from weft_actors import Client

pytestmark = pytest.mark.timeout(180)

WORKFLOWS = 8
CHARGE_SECONDS = 2.0
NAP_SECONDS = 0.5


def test_sigterm_hands_one_hosts_workflows_to_the_other_without_rerunning_an_activity(postgres_url: str, tmp_path: Path) -> None:
    url = new_schema(postgres_url)
    runs = tmp_path / "runs"
    runs.mkdir()
    env = {"WEFT_TEST_RUNS": str(runs)}
    tags = [f"t{i}" for i in range(WORKFLOWS)]
    failures: list[BaseException] = []
    served = [0]
    started: list[str] = []
    stop = threading.Event()
    with (
        RunningSupervisor(url, shards=2, app="handoff_app", args=TIMING, env=env) as host_a,
        RunningSupervisor(url, shards=2, app="handoff_app", args=TIMING, env=env) as host_b,
    ):

        def survivors_client() -> None:  # steady requests to host B through the whole drain
            with Client(host_b.endpoint, timeout=30) as client:
                while not stop.is_set():
                    try:
                        assert client.execute("quick", served[0], timeout=20) == served[0]
                        served[0] += 1
                    except BaseException as exc:  # noqa: BLE001 - counted, named below
                        failures.append(exc)
                    time.sleep(0.01)

        def leavers_client() -> None:
            # Plain starts (no id: not safe to send twice) to the leaving host first, the other
            # as its failover: none may fail, and none may be applied twice (counted below).
            with Client([host_a.endpoint, host_b.endpoint], timeout=30) as client:
                while not stop.is_set():
                    try:
                        started.append(client.start("quick", 1000 + len(started)).id)
                    except BaseException as exc:  # noqa: BLE001 - counted, named below
                        failures.append(exc)
                    time.sleep(0.005)

        with Client(host_a.endpoint, timeout=30) as client:
            for tag in tags:
                client.start("charge_then_nap", tag, CHARGE_SECONDS, NAP_SECONDS, id=tag)
        wait_until(lambda: len(list(runs.glob("*.start.*"))) == WORKFLOWS, 20, "every charge running on host A")
        load = threading.Thread(target=survivors_client, daemon=True)
        load.start()
        leaving = threading.Thread(target=leavers_client, daemon=True)
        leaving.start()
        wait_until(lambda: served[0] >= 5 and len(started) >= 5, 20, "both hosts serving")
        assert host_a.terminate(60) == 0, host_a.log_text()[-3000:]
        log_a = host_a.log_text()
        handed = [(int(n), int(r)) for n, r in re.findall(r"handed (\d+) workflows to \w+ \((\d+) released\)", log_a)]
        assert handed and sum(n for n, _ in handed) == WORKFLOWS and all(r == 0 for _, r in handed), log_a[-3000:]
        with Client(host_b.endpoint, timeout=30) as client:
            for tag in tags:
                assert client.get_handle(tag).result(timeout=30) == f"charged {tag}"
        before = served[0]
        wait_until(lambda: served[0] >= before + 5, 20, "host B still serving")
        stop.set()
        load.join(30)
        leaving.join(30)
        with Client(host_b.endpoint, timeout=30) as client:
            listed = client.list(type="quick", limit=10_000)["items"]
    assert failures == [], failures[:5]
    assert len(started) > 5 and len(set(started)) == len(started)
    assert len(listed) == served[0] + len(started)  # each start applied once, none lost
    for tag in tags:  # each charge ran once: host A let its attempts finish, then handed off
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag
