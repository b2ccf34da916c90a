"""Real supervisor, real shards, real PostgreSQL: a client's start whose commit the server holds
"in progress" past the shard's wait (``store._pg._outcome``), its reply lost by a proxy, is
answered ``OutcomeUnknown`` (code ``outcome_unknown``), never a failure. Once the server has
made that commit, the start exists: a retried start with ``if_exists="return"`` finds it, and
the shard that committed it runs it to its end (nothing else would: it holds its claim)."""

from __future__ import annotations

import pytest

from _commit_cutter import CommitCutter, release_once_held, slow_commits, tidy
from _processes import RunningSupervisor
from weft_actors import Client
from weft_actors.errors import OutcomeUnknown
from weft_actors.store._pg._outcome import OUTCOME_WAIT

WID = "wf-client-outcome-unknown"
ARGS = ("--heartbeat", "0.5", "--ttl", "10")
"""A long ttl: the shard's heartbeat waits for the write lock the held commit keeps."""


@pytest.mark.timeout(90)
def test_a_client_start_answered_outcome_unknown_that_landed_is_found_and_run(schema_url: str) -> None:
    cutter = CommitCutter(schema_url)
    try:
        with RunningSupervisor(cutter.url(schema_url), args=ARGS) as sup, Client(sup.endpoint, timeout=OUTCOME_WAIT + 15) as client:
            slow_commits(schema_url, WID)  # once the shards have made the store's tables
            cutter.cut_held_commit(schema_url)
            releaser = release_once_held(schema_url, OUTCOME_WAIT + 1.5)  # past the shard's wait
            with pytest.raises(OutcomeUnknown) as caught:
                client.start("three_steps", 1, id=WID)
            assert caught.value.code == "outcome_unknown"
            assert cutter.cut.is_set()
            releaser.join(15.0)
            handle = client.start("three_steps", 1, id=WID, if_exists="return")
            assert handle.id == WID and handle.run_id
            assert handle.result(timeout=10.0) == 4
            assert client.get_handle(WID).describe()["run_id"] == handle.run_id  # the one start, run once
    finally:
        tidy(schema_url, cutter)
