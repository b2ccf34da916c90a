"""Real supervisor, one real shard: a reply built in its commit's pass (a start's, a signal's,
an update's, a result's or an execute's, a signal-with-start's, a terminate's) carries exactly
what the call returns or raises, errors included, and each call is answered once."""

from __future__ import annotations

import pytest

from _processes import RunningSupervisor
from weft_actors import Client
from weft_actors.errors import UpdateFailed, UpdateRejected, WorkflowAlreadyExists, WorkflowFailed, WorkflowTerminated

APP = "replies_app"


@pytest.mark.timeout(60)
def test_replies_given_in_the_commit_pass_carry_what_the_call_returns_or_raises(either_store):
    with RunningSupervisor(either_store, shards=1, app=APP) as sup, Client(sup.endpoint, timeout=10) as client:
        handle = client.start("answers_then_fails", id="w-1")
        assert (handle.id, bool(handle.run_id)) == ("w-1", True)
        with pytest.raises(WorkflowAlreadyExists):
            client.start("answers_then_fails", id="w-1")
        assert handle.update("add", 41) == 42
        assert handle.update("add", 1, request_id="r-1") == 2
        assert handle.update("add", 1, request_id="r-1") == 2  # a retry: the stored answer
        with pytest.raises(UpdateRejected):
            handle.update("add", -1)
        with pytest.raises(UpdateFailed, match="zero"):
            handle.update("add", 0)
        again = client.signal_with_start("answers_then_fails", signal="fail", id="w-1")
        assert (again.id, again.run_id) == ("w-1", handle.run_id)
        with pytest.raises(WorkflowFailed, match="as asked"):
            handle.result(timeout=10)
        assert client.execute("returns", {"a": {1, 2}}, timeout=10) == {"a": {1, 2}}
        with pytest.raises(WorkflowFailed, match="no thanks"):
            client.execute("fails_at_once", "no thanks", timeout=10)
        third = client.start("answers_then_fails", id="w-3")
        third.terminate("enough")
        with pytest.raises(WorkflowTerminated):
            third.result(timeout=10)
        assert client.ping() == "pong"  # nothing answered twice: the next call gets its own reply
