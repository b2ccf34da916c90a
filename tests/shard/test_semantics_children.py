"""Child workflows on the embedded engine: results and failures reach the parent through its
durable inbox, ``parent_close`` policies apply when the parent closes, and a child whose type
only another engine runs is driven there and still reports back."""

from __future__ import annotations

from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.errors import ChildWorkflowError, WorkflowAlreadyExists, WorkflowCancelled, WorkflowTerminated

pytestmark = pytest.mark.timeout(20)


@workflow
async def kid(ctx, x: int) -> int:
    if x < 0:
        raise ValueError(f"negative {x}")
    return x * 2


@workflow
async def sleepy_kid(ctx) -> str:
    extra = await ctx.wait_signal("wake")
    return f"woke {extra}"


@workflow
async def family(ctx) -> Any:
    good = await ctx.child(kid, 21, id="good-kid")
    try:
        await ctx.child(kid, -1)
    except ChildWorkflowError as exc:
        bad = [exc.workflow_id, exc.status, exc.type, exc.cause_message]
    return [good, bad]


@workflow
async def guardian(ctx, policy: str) -> str:
    return await ctx.child(sleepy_kid, id=f"kid-of-{ctx.workflow_id}", parent_close=policy)


@workflow
async def impatient(ctx) -> Any:
    outcome = await ctx.race([ctx.child(sleepy_kid, id="raced-kid"), ctx.sleep(0.05)])
    await ctx.wait_signal("finish")  # were it to end now, parent_close would apply to the child
    return outcome


@workflow
async def clashing(ctx) -> str:
    try:
        await ctx.child(kid, 1, id="taken")
    except WorkflowAlreadyExists:
        return "id taken"
    return "started"


APP = [kid, sleepy_kid, family, guardian, impatient, clashing]


def test_child_result_and_child_failure_reach_the_parent(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(family, id="fam")
            good, bad = await handle.result(timeout=5)
            assert good == 42
            child_id, status, error_type, message = bad
            assert status == "failed" and error_type == "ValueError" and message == "negative -1"
            assert child_id.startswith("fam/")
            assert (await engine.get_handle("good-kid").describe())["parent"] == "fam"
            history = (await handle.describe())["history"]
            assert [(op["kind"], op.get("child_id")) for op in history] == [("child", "good-kid"), ("child", child_id)]
            assert engine.store.load_inbox("fam") == []  # both child-done messages consumed

    run(main())


@pytest.mark.parametrize("policy, ending", [("terminate", "terminated"), ("cancel", "cancelled"), ("abandon", "running")])
def test_parent_close_policy_applies_when_the_parent_is_terminated(tmp_path, policy, ending):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            parent = await engine.start(guardian, policy, id="p")
            child = engine.get_handle("kid-of-p")
            await eventually(lambda: "kid-of-p" in engine.actors)
            await parent.terminate("enough")
            with pytest.raises(WorkflowTerminated):
                await parent.result(timeout=5)
            await eventually(lambda: engine.store.get_workflow("kid-of-p")["status"] == ending)
            if ending == "terminated":
                with pytest.raises(WorkflowTerminated):
                    await child.result(timeout=5)
            elif ending == "cancelled":
                with pytest.raises(WorkflowCancelled):
                    await child.result(timeout=5)
            else:  # abandoned: it runs on, and its ending no longer concerns the parent
                await child.signal("wake", 1)
                assert await child.result(timeout=5) == "woke 1"
                assert engine.store.load_inbox("p") == []

    run(main())


def test_a_child_that_loses_a_race_is_asked_to_cancel(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(impatient, id="imp")
            # Started by the parent's first step: committed soon after the parent's start.
            await eventually(lambda: engine.store.get_workflow("raced-kid") is not None)
            with pytest.raises(WorkflowCancelled):
                await engine.get_handle("raced-kid").result(timeout=5)
            await handle.signal("finish")
            assert await handle.result(timeout=5) == (1, None)
            assert engine.store.load_inbox("imp") == []  # the loser's child-done was dropped

    run(main())


def test_a_child_terminated_from_outside_raises_in_the_parent(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            parent = await engine.start(guardian, "terminate", id="p")
            await eventually(lambda: "kid-of-p" in engine.actors)
            await engine.get_handle("kid-of-p").terminate("stop it")
            with pytest.raises(Exception) as info:
                await parent.result(timeout=5)
            assert "kid-of-p" in str(info.value) and "terminated" in str(info.value)
            assert info.value.type.endswith("ChildWorkflowError")

    run(main())


def test_a_child_id_of_a_running_workflow_raises_in_the_parent_one_that_finished_is_reused(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            taken = await engine.start(sleepy_kid, id="taken")
            assert await (await engine.start(clashing, id="c1")).result(timeout=5) == "id taken"
            await taken.signal("wake", 0)
            await taken.result(timeout=5)
            assert await (await engine.start(clashing, id="c2")).result(timeout=5) == "started"
            assert (await taken.describe())["parent"] == "c2"

    run(main())


def test_a_child_of_a_type_only_another_engine_runs_reports_back_through_the_inbox(tmp_path):
    async def main():
        options = {"heartbeat": 0.05, "ttl": 0.15}
        async with Engine(str(tmp_path), app=[guardian], **options) as parents, Engine(str(tmp_path), app=[sleepy_kid], **options) as kids:
            handle = await parents.start(guardian, "terminate", id="p")
            await eventually(lambda: "kid-of-p" in kids.actors)  # reclaimed by the engine that can run it
            assert "kid-of-p" not in parents.actors
            await parents.signal("kid-of-p", "wake", "across")
            assert await handle.result(timeout=5) == "woke across"
            assert kids.store.get_workflow("kid-of-p")["status"] == "completed"

    run(main())


# -- children started without waiting (start_child) -----------------------------------------


@workflow
async def dispatcher(ctx, rounds: int, ended: list) -> Any:
    """Starts a waiting child and a failing one, cancels the first and terminates a third;
    continues as new once, so the endings of children of an earlier run reach the later one."""
    ctx.on_child_done(lambda child_id, status: ended.append([child_id, status]))
    if rounds == 0:
        first = await ctx.start_child(sleepy_kid, id="d-sleepy")
        assert isinstance(first, str) and len(first) == 32  # its run id, at once
        await ctx.start_child(kid, -1, id="d-failing")
        try:
            await ctx.start_child(kid, 1, id="d-failing")  # that id has started: never again
        except WorkflowAlreadyExists:
            ended.append(["refused", "d-failing"])
        await ctx.start_child(sleepy_kid, id="d-terminated")
        return ctx.continue_as_new(1, ended)
    await ctx.cancel_child("d-sleepy")
    await ctx.terminate_child("d-terminated", "not needed")
    await ctx.wait_condition(lambda: len(ended) >= 4)
    return sorted(ended)


def test_start_child_returns_at_once_and_each_ending_reaches_the_current_run(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=[kid, sleepy_kid, dispatcher]) as engine:
            handle = await engine.start(dispatcher, 0, [], id="dispatcher")
            assert await handle.result(timeout=10) == [
                ["d-failing", "failed"], ["d-sleepy", "cancelled"], ["d-terminated", "terminated"], ["refused", "d-failing"],
            ]
            terminated = await engine.get_handle("d-terminated").describe()
            assert terminated["status"] == "terminated" and terminated["error"]["message"] == "not needed"
            assert (await engine.get_handle("d-sleepy").describe())["parent"] == "dispatcher"

    run(main())
