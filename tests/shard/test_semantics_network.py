"""The semantics calls over the network: a real supervisor with two shards and round-robin
routing, so most requests land on a shard that does not own the workflow."""

from __future__ import annotations

from pathlib import Path

import pytest

from _processes import TESTS, RunningSupervisor
from weft_actors import Client
from weft_actors.errors import UpdateRejected, WorkflowCancelled

pytestmark = pytest.mark.timeout(60)

HERE = Path(__file__).parent


def test_update_signal_with_start_and_cancel_through_the_front_door(tmp_path):
    env = {"PYTHONPATH": f"{TESTS}:{HERE}"}
    args = ("--routing", "round-robin")
    with RunningSupervisor(tmp_path / "data", app="semantics_app", args=args, env=env) as sup, Client(sup.endpoint) as client:
        upd = client.start("upd_flow", id="upd")
        assert upd.update("add", "a", request_id="n-1") == 1
        assert upd.update("add", "a", request_id="n-1") == 1  # a retry: answered, not applied again
        with pytest.raises(UpdateRejected, match="text only"):
            upd.update("add", 7)
        assert upd.update("add", "b") == 2
        assert upd.update("close") is None
        assert upd.result(timeout=20) == {"items": ["a", "b"], "middle": "upd"}

        race = client.signal_with_start("race_flow", signal="more", payload="m", id="race")
        client.signal_with_start("race_flow", signal="go", payload="g", id="race")  # running: just signalled
        assert race.result(timeout=20) == [(1, "g"), [42, "m"]]

        cancel = client.start("cancel_flow", id="cancel")
        cancel.cancel()
        with pytest.raises(WorkflowCancelled):
            cancel.result(timeout=20)
        assert [op["kind"] for op in cancel.describe()["history"]] == ["activity", "activity"]
