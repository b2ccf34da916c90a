"""A start answered ``OutcomeUnknown`` whose commit then lands is driven to completion by the
engine that committed it.

On a real PostgreSQL server, through a real engine: a proxy loses the reply of the start's
``COMMIT`` while a deferred trigger holds that commit "in progress" on the server past the
store's wait (``store._pg._outcome``), so the caller is told the outcome is unknown; then the
server finishes it. The workflow exists, claimed by this engine, with no actor: unless the
engine drives it again once the outcome is known, nothing ever does while it lives.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from _commit_cutter import CommitCutter, release_commit, release_once_held, slow_commits
from _support import run
from weft_actors import Engine, examples
from weft_actors.errors import OutcomeUnknown
from weft_actors.store._pg import _outcome

WID = "wf-outcome-unknown"
OUTCOME_WAIT = 1.0
"""The store's wait for an in-progress commit here (5 s by default): the server holds the
commit for ``HELD`` seconds, past it."""
HELD = 2.0


@pytest.mark.timeout(60)
def test_a_start_answered_outcome_unknown_whose_commit_lands_is_driven_to_completion(schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_outcome, "OUTCOME_WAIT", OUTCOME_WAIT)
    cutter = CommitCutter(schema_url)

    async def main() -> None:
        async with Engine(store=cutter.url(schema_url), app=examples, heartbeat=0.2, ttl=5.0) as engine:
            slow_commits(schema_url, WID)  # its tables exist once the engine has opened the store
            cutter.cut_commit_of(WID.encode())
            # Released from a thread: the engine's own heartbeat waits for the write lock that
            # the held commit keeps, so its loop cannot be counted on until then.
            releaser = release_once_held(schema_url, HELD)
            with pytest.raises(OutcomeUnknown) as caught:
                await engine.start("three_steps", 1, id=WID)
            assert caught.value.code == "outcome_unknown"
            assert cutter.cut.is_set()  # the start's commit reply was lost
            releaser.join(10.0)
            landed = time.monotonic()
            result = await engine.get_handle(WID).result(timeout=10.0)
            assert result == 4
            assert time.monotonic() - landed < 5.0
            record: Any = engine.store.get_workflow(WID)
            assert record["status"] == "completed"
            assert engine.stats()["claims_active"] == 0  # nothing of it left claimed here
            assert engine.state == "running"

    try:
        run(main())
    finally:
        try:
            release_commit(schema_url)
        except psycopg.Error:
            pass
        cutter.close()
