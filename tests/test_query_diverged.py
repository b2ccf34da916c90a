"""A query of a workflow whose replay diverges from its history (a deploy that changed its
code) is refused with ``invalid_request``, not answered from the part of its state the
diverged replay rebuilt: a stuck workflow in memory, and a finished one replayed read-only
(real supervisors, real shards, real LMDB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.errors import InvalidRequest

pytestmark = pytest.mark.timeout(120)


def test_a_query_of_a_diverged_run_is_refused_not_answered_wrong(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with RunningSupervisor(data, shards=1, app="review_app") as sup, Client(sup.endpoint, timeout=10) as client:
        client.start("diverging", id="dv-running")
        done = client.start("diverging", id="dv-done")
        wait_until(lambda: client.get_handle("dv-done").query("progress") == ["a"], what="first step")
        done.signal("go")
        assert done.result(timeout=10) == "done"
        wait_until(lambda: client.get_handle("dv-running").query("progress") == ["a"], what="first step")
        assert sup.terminate() == 0
    with RunningSupervisor(data, shards=1, app="review_app", env={"WEFT_REVIEW_VARIANT": "2"}) as sup, Client(sup.endpoint, timeout=10) as client:
        wait_until(lambda: client.get_handle("dv-running").describe()["status"] == "stuck", timeout=20, what="stuck")
        for wid, status in (("dv-running", "stuck"), ("dv-done", "completed")):
            with pytest.raises(InvalidRequest, match="cannot be queried: its replay diverges") as refused:
                client.get_handle(wid).query("progress")
            assert refused.value.code == "invalid_request" and refused.value.context["status"] == status
            assert "activity 'step'" in str(refused.value)
        assert sup.terminate() == 0
    with RunningSupervisor(data, shards=1, app="review_app") as sup, Client(sup.endpoint, timeout=10) as client:  # the fix
        wait_until(lambda: client.get_handle("dv-running").describe()["status"] == "running", timeout=20, what="running again")
        assert client.get_handle("dv-running").query("progress") == ["a"]
        assert client.get_handle("dv-done").query("progress") == ["a"]
