"""Results obey the payload limit too: an oversized activity result fails that attempt (not
retried), an oversized workflow result fails the workflow, an oversized update result or
query answer fails that call; the engine serves on, in-process and behind the supervisor."""

from __future__ import annotations

import pytest

from _processes import RunningSupervisor
from _support import run
from weft_actors import Client, Engine, activity, workflow
from weft_actors.errors import ActivityError, PayloadTooLarge, WorkflowFailed

CALLS: list[int] = []


@activity
async def blob(size: int) -> bytes:
    CALLS.append(size)
    return b"x" * size


@workflow
async def via_activity(ctx, size: int) -> object:
    try:
        return len(await ctx.run(blob, size))
    except ActivityError as exc:
        return {"type": exc.type, "attempts": exc.attempts}


@workflow
async def returns(ctx, size: int) -> bytes:
    return b"y" * size


@workflow
async def holder(ctx) -> int:
    state = {"size": 10}

    def grow(size: int) -> bytes:
        state["size"] = size
        return b"u" * size

    ctx.on_query("blob", lambda: b"q" * state["size"])
    ctx.on_update("grow", grow)
    await ctx.wait_condition(lambda: state["size"] < 0)
    return 0


APP = [via_activity, returns, holder]


def test_oversized_results_fail_their_attempt_workflow_update_or_query_and_the_engine_serves_on(tmp_path):
    CALLS.clear()

    async def main():
        async with Engine(str(tmp_path), app=APP, payload_limit=1000) as engine:
            outcome = await engine.execute(via_activity, 5000, timeout=10)
            assert outcome == {"type": "weft_actors.errors.PayloadTooLarge", "attempts": 1}
            assert CALLS == [5000]  # non-retryable: one attempt
            assert await engine.execute(via_activity, 900, timeout=10) == 900
            with pytest.raises(WorkflowFailed, match="workflow result is .* bytes; the limit is 1000"):
                await engine.execute(returns, 5000, timeout=10)
            assert engine.store.get_workflow((await engine.start(returns, 10)).id) is not None
            handle = await engine.start(holder, id="h")
            with pytest.raises(PayloadTooLarge, match="result of update 'grow'"):
                await handle.update("grow", 5000)
            with pytest.raises(PayloadTooLarge, match="query answer is"):
                await handle.query("blob")  # the update ran (size is 5000); its answer did not fit
            assert await handle.update("grow", 20) == b"u" * 20
            assert await handle.query("blob") == b"q" * 20
            assert engine.state == "running"

    run(main())


@pytest.mark.timeout(90)
def test_an_activity_result_over_the_limit_behind_the_supervisor_fails_it_and_the_shard_stays(tmp_path):
    with RunningSupervisor(tmp_path / "data", shards=1, app="test_result_limits") as sup, Client(sup.endpoint, timeout=30) as client:
        pid = client.stats()["shards"][0]["pid"]
        outcome = client.execute("via_activity", 8 << 20)  # 8 MiB against the default 1 MiB
        assert outcome["type"] == "weft_actors.errors.PayloadTooLarge" and outcome["attempts"] == 1
        with pytest.raises(WorkflowFailed, match="PayloadTooLarge|workflow result is"):
            client.execute("returns", 4 << 20)
        assert client.execute("via_activity", 1000) == 1000
        stats = client.stats()
        assert stats["shards"][0]["pid"] == pid and stats["supervisor"]["restarts"] == 0
