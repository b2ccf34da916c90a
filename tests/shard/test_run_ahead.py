"""A run goes ahead of its last outcome's commit, and nobody can tell: the ending rides on that
commit (one commit less per workflow), the next op waits for it, and so does a query."""

from __future__ import annotations

import asyncio

from steps_app import add_one, three_steps
from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.errors import WeftError
from weft_actors.shard._committer import GroupCommitter
from weft_actors.store import StepCommit


@workflow
async def counts_then_parks(ctx) -> None:
    state = {"steps": 0}
    ctx.on_query("steps", lambda: state["steps"])
    for _ in range(2):
        await ctx.run(add_one, 0)
        state["steps"] += 1
    await ctx.wait_signal("never")


@workflow
async def counts_forever(ctx) -> None:
    state = {"steps": 0}
    ctx.on_query("steps", lambda: state["steps"])
    while True:  # every activity ends inline: each step's run goes ahead of its commit
        await ctx.run(add_one, 0)
        state["steps"] += 1


APP = [three_steps, counts_then_parks, counts_forever]


def test_the_ending_rides_on_the_last_outcome_commit(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            before = engine.stats()["writes_total"]
            handle = await engine.start(three_steps, 1)
            assert await handle.result(timeout=10) == 4
            # The start, then one write per step; the third carries the ending.
            assert engine.stats()["writes_total"] - before == 4
            described = await handle.describe()
            assert described["status"] == "completed"
            assert [op["outcome"] for op in described["history"]] == ["ok", "ok", "ok"]

    run(main())


def test_a_query_waits_for_the_commit_its_run_went_ahead_of(tmp_path):
    """A query that arrives between an outcome's resume and its commit answers only once the
    commit has landed, with the state after it (never a state a failed commit could take back)."""

    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            committer = engine.committer
            answers: list[tuple[int, int]] = []
            queried: list[asyncio.Future] = []

            class QueryJustBeforeTheStepCommit(GroupCommitter):
                __slots__ = ()

                def submit(self, intent, callback):
                    if isinstance(intent, StepCommit) and intent.ops and not queried:
                        actor = engine.actors[intent.wid]
                        assert actor.ahead is not None  # the run went ahead of this commit
                        batches = committer.batches

                        async def query():
                            steps = await engine.query(intent.wid, "steps")
                            answers.append((steps, committer.batches - batches))

                        queried.append(asyncio.ensure_future(query()))
                    super().submit(intent, callback)

            committer.__class__ = QueryJustBeforeTheStepCommit
            try:
                handle = await engine.start(counts_then_parks)
                while not queried:
                    await asyncio.sleep(0.001)
                await asyncio.wait_for(queried[0], 10)
            finally:
                committer.__class__ = GroupCommitter
            steps, commits_since = answers[0]
            assert commits_since >= 1, "the query was answered before the commit"
            # Committed state, answered as the first step's commit landed (the run went on
            # ahead of the second one right after).
            assert steps == 1
            await handle.terminate()

    run(main())


def test_a_query_to_a_run_that_always_goes_ahead_is_answered_within_one_commit(tmp_path):
    """The run goes ahead of every commit; a query waiting for committed state is answered as
    that commit lands, before the run goes on (never starved until it stops going ahead)."""

    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(counts_forever)
            await eventually(lambda: engine.committer.batches > 20)

            async def query() -> tuple[int, int]:
                before = engine.committer.batches
                steps = await engine.query(handle.id, "steps")
                return steps, engine.committer.batches - before

            for _ in range(3):
                steps, commits_since = await asyncio.wait_for(query(), 5)
                assert commits_since == 1  # answered as the commit in flight landed
                assert steps >= 20
            await handle.terminate()

    run(main())


def test_a_dropped_actor_wakes_its_result_waiters(tmp_path):
    """``result`` keeps no timer of its own while the workflow's actor lives here; an actor
    dropped without ending its run (here: a failed commit) wakes the waiters to look again."""

    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(counts_then_parks)
            waiter = asyncio.ensure_future(handle.result())
            while handle.id not in engine.waiters.by_wid:
                await asyncio.sleep(0.001)
            (future,) = engine.waiters.by_wid[handle.id]
            engine.commit_failed(engine.actors[handle.id], WeftError("the disk went away"))
            assert future.done() and future.result() is None
            await handle.terminate()
            await asyncio.wait_for(asyncio.gather(waiter, return_exceptions=True), 10)

    run(main())
