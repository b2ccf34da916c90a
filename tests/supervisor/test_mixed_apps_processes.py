"""Two real supervisors on one data directory with different ``--app`` modules: each says so
in one WARNING naming the other's engines and the types that differ (the one already running
when the second joins, and the one joining), and each still runs its own workflows."""

from __future__ import annotations

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)

FAST = ("--heartbeat", "0.2", "--ttl", "0.6")
WARNING = "engines on this store register different workflow types"


def _engine_ids(client: Client) -> list[str]:
    return [shard["engine_id"] for shard in client.stats()["shards"]]


def _warnings(sup: RunningSupervisor) -> list[str]:
    return [line for line in sup.log_text().splitlines() if WARNING in line]


def test_a_second_supervisor_with_another_app_is_warned_about_on_both_sides(tmp_path):
    data = tmp_path / "data"
    with RunningSupervisor(data, shards=1, app="supervisor_app", args=FAST) as first, Client(first.endpoint, timeout=10) as first_client:
        assert _warnings(first) == []  # alone on its store
        with RunningSupervisor(data, shards=1, app="steps_app", args=FAST) as second, Client(second.endpoint, timeout=10) as second_client:
            [first_engine], [second_engine] = _engine_ids(first_client), _engine_ids(second_client)
            joined = wait_until(lambda: _warnings(second), timeout=20, what="the joining supervisor's warning")
            noticed = wait_until(lambda: _warnings(first), timeout=20, what="the running supervisor's warning")
            assert len(joined) == 1 and " supervisor WARNING " in joined[0], second.log_text()
            assert "this supervisor (--app steps_app) runs [three_steps]" in joined[0]
            assert f"engine {first_engine}: they lack [three_steps]; [echo, failing, slow_steps, waiter] only they run" in joined[0]
            assert len(noticed) == 1 and " supervisor WARNING " in noticed[0], first.log_text()
            assert "this supervisor (--app supervisor_app) runs [echo, failing, slow_steps, waiter]" in noticed[0]
            assert f"engine {second_engine}: they lack [echo, failing, slow_steps, waiter]; [three_steps] only they run" in noticed[0]
            # Each side still runs its own types, whoever's shard the hash would prefer.
            assert second_client.execute("three_steps", 1, timeout=20) == 4
            assert first_client.execute("echo", "x", timeout=20) == "x"
        assert len(_warnings(first)) == 1  # said once, not again as the second one leaves
