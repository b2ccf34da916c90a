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
from typing import Any, Awaitable, Callable

import pytest

from _commit_cutter import CommitCutter, held_for, release_commit, release_once_held, slow_commits, tidy
from _support import eventually, run
from weft_actors import Engine, examples, workflow
from weft_actors.errors import OutcomeUnknown, StorageError
from weft_actors.store._pg import _outcome

WID = "wf-outcome-unknown"
OUTCOME_WAIT = 1.0
"""The store's wait for an in-progress commit here (5 s by default): the server holds the
commit for ``HELD`` seconds, past it."""
HELD = 2.0
CHILD = "wf-outcome-unknown-child"


@workflow
async def parent_of_one(ctx: Any) -> int:
    return await ctx.child("three_steps", 1, id=CHILD)


@pytest.mark.timeout(60)
def test_a_start_answered_outcome_unknown_whose_commit_lands_is_driven_to_completion(schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def then(engine: Engine) -> None:
        # The server makes the held commit a moment after its release (its trigger polls):
        # until then reads of this store refuse (``_outcome``), so look once it has. (No
        # backend in ``pg_sleep`` is not enough: the trigger is between two sleeps at times.)
        await eventually(lambda: held_for(schema_url) == 0.0 and _readable(engine), timeout=5.0)
        landed = time.monotonic()
        result = await engine.get_handle(WID).result(timeout=10.0)
        assert result == 4
        assert time.monotonic() - landed < 5.0
        record: Any = engine.store.get_workflow(WID)
        assert record["status"] == "completed"

    held_start(schema_url, monkeypatch, True, then)


def _readable(engine: Engine) -> bool:
    """Whether the store answers reads: no commit of its is still in progress on the server."""
    try:
        engine.store.get_workflow(WID)
    except StorageError:
        return False
    return True


@pytest.mark.timeout(60)
def test_a_start_answered_outcome_unknown_whose_commit_failed_leaves_nothing(schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit did not land: the drive finds no workflow and does nothing; a retried start
    creates it, here, and it runs."""

    async def then(engine: Engine) -> None:
        assert engine.commit_retry.waiting == 1  # to be driven again, if it is there
        await eventually(lambda: not engine.orphans and not engine.commit_retry.waiting, timeout=5.0)  # looked at
        assert engine.store.get_workflow(WID) is None
        assert WID not in engine.actors
        release_commit(schema_url)  # the next commit of it is made
        handle = await engine.start("three_steps", 1, id=WID, if_exists="return")
        assert await handle.result(timeout=10.0) == 4

    held_start(schema_url, monkeypatch, False, then)


@pytest.mark.timeout(60)
def test_a_child_started_by_a_step_answered_outcome_unknown_that_landed_runs(schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step of a running workflow that starts a child (claimed here in that commit) is
    answered ``OutcomeUnknown`` and lands: the parent is driven again as any refused step,
    and so is the child, so the parent gets the child's result."""
    monkeypatch.setattr(_outcome, "OUTCOME_WAIT", OUTCOME_WAIT)
    cutter = CommitCutter(schema_url)

    async def main() -> None:
        async with Engine(store=cutter.url(schema_url), app=[parent_of_one, examples.three_steps], heartbeat=0.2, ttl=5.0) as engine:
            slow_commits(schema_url, CHILD)
            cutter.cut_held_commit(schema_url)
            releaser = release_once_held(schema_url, HELD)
            handle = await engine.start(parent_of_one, id="wf-parent")
            await eventually(cutter.cut.is_set, timeout=10.0)  # the step's commit reply was lost
            releaser.join(10.0)
            await eventually(lambda: held_for(schema_url) == 0.0, timeout=5.0)  # made (reads refuse until then)
            assert await handle.result(timeout=15.0) == 4
            child: Any = engine.store.get_workflow(CHILD)
            assert child["status"] == "completed"
            await eventually(lambda: engine.stats()["claims_active"] == 0, timeout=5.0)

    try:
        run(main())
    finally:
        tidy(schema_url, cutter)


def held_start(schema_url: str, monkeypatch: pytest.MonkeyPatch, lands: bool, then: Callable[[Engine], Awaitable[None]]) -> None:
    """Start ``WID`` on an engine whose commit of it the server holds past the store's wait,
    its reply lost: the start is answered ``OutcomeUnknown``; the commit is then made
    (``lands``) or fails; then ``then(engine)``, and nothing of it is left claimed."""
    monkeypatch.setattr(_outcome, "OUTCOME_WAIT", OUTCOME_WAIT)
    cutter = CommitCutter(schema_url)

    async def main() -> None:
        async with Engine(store=cutter.url(schema_url), app=examples, heartbeat=0.2, ttl=5.0) as engine:
            slow_commits(schema_url, WID)  # its tables exist once the engine has opened the store
            cutter.cut_held_commit(schema_url)
            # Released from a thread: the test's own waits below hold the loop.
            releaser = release_once_held(schema_url, HELD, lands)
            with pytest.raises(OutcomeUnknown) as caught:
                await engine.start("three_steps", 1, id=WID)
            assert caught.value.code == "outcome_unknown"
            assert cutter.cut.is_set()  # the start's commit reply was lost
            releaser.join(10.0)
            await then(engine)
            await eventually(lambda: engine.stats()["claims_active"] == 0, timeout=5.0)  # nothing of it left claimed
            assert engine.state == "running"

    try:
        run(main())
    finally:
        tidy(schema_url, cutter)
