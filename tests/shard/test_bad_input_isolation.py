"""Bad input is refused at the call that carried it, with ``InvalidRequest``, and never reaches
the group commit it would share with other calls: times that do not fit (NaN, infinities,
negatives, absurd lengths) and empty or malformed ids and names, for every client call and
every ``ctx`` operation that takes them."""

from __future__ import annotations

import asyncio
import math

import pytest

from _support import run
from steps_app import three_steps
from weft_actors import Engine, workflow
from weft_actors.errors import InvalidRequest, WorkflowFailed

BAD_SECONDS = [math.nan, math.inf, -math.inf, -1.0, 1e300, "5", True]


@workflow
async def sleeps(ctx, seconds) -> str:
    try:
        await ctx.sleep(seconds)
    except InvalidRequest as exc:
        return f"refused: {exc}"
    return "slept"


@workflow
async def sleeps_uncaught(ctx, seconds) -> str:
    await ctx.sleep(seconds)
    return "slept"


@workflow
async def waits(ctx, how: str, timeout) -> str:
    try:
        if how == "signal":
            await ctx.wait_signal("go", timeout=timeout)
        else:
            await ctx.wait_condition(lambda: False, timeout=timeout)
    except InvalidRequest:
        return "refused"
    return "waited"


@workflow
async def idle(ctx) -> None:
    await ctx.wait_signal("never")


APP = [three_steps, sleeps, sleeps_uncaught, waits, idle]


async def _bounded(awaitable, seconds: float = 5.0):
    """A call the original code never answered fails the test instead of hanging it."""
    return await asyncio.wait_for(awaitable, seconds)


@pytest.mark.parametrize("option", ["start_at", "start_delay", "execution_timeout"])
def test_out_of_range_start_times_are_invalid_requests_and_spare_the_batch(tmp_path, option):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            for value in (1e300, math.inf, math.nan) + ((-1.0,) if option != "start_at" else ()):
                bad = engine.start(three_steps, 1, **{option: value})
                good = engine.execute(three_steps, 2)  # submitted in the same loop turn
                bad_result, good_result = await _bounded(asyncio.gather(bad, good, return_exceptions=True))
                assert isinstance(bad_result, InvalidRequest), bad_result
                assert option in str(bad_result)
                assert good_result == 5

    run(main())


def test_ctx_sleep_of_an_unusable_time_raises_in_the_workflow_and_spares_the_others(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            for seconds in BAD_SECONDS:
                results = await _bounded(
                    asyncio.gather(engine.execute(sleeps, seconds), engine.execute(three_steps, 1), engine.execute(sleeps, 0))
                )
                assert results[0].startswith("refused: sleep"), (seconds, results)
                assert results[1:] == [4, "slept"]
            with pytest.raises(WorkflowFailed) as failed:
                await _bounded(engine.execute(sleeps_uncaught, math.inf))
            assert failed.value.type.endswith("InvalidRequest")
            for how in ("signal", "condition"):
                assert await _bounded(engine.execute(waits, how, math.inf)) == "refused"
                assert await _bounded(engine.execute(waits, how, -1)) == "refused"

    run(main())


def _calls(engine: Engine, wid):
    return {
        "signal": lambda: engine.signal(wid, "go", 1),
        "update": lambda: engine.update(wid, "bump", 1),
        "cancel": lambda: engine.cancel(wid),
        "terminate": lambda: engine.terminate(wid),
        "purge": lambda: engine.purge(wid),
        "query": lambda: engine.query(wid, "state"),
        "describe": lambda: engine.describe(wid),
        "result": lambda: engine.result(wid, timeout=1),
        "signal_with_start": lambda: engine.signal_with_start(idle, signal="go", id=wid),
        "start": lambda: engine.start(idle, id=wid),
    }


@pytest.mark.parametrize("wid", ["", None, 7, "a\x00b", "x" * 300])
def test_every_call_refuses_a_bad_workflow_id_and_spares_the_batch(tmp_path, wid):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            for name, call in _calls(engine, wid).items():
                if wid is None and name in ("start", "signal_with_start"):
                    continue  # no id there means "make one"
                # The bad call shares its loop turn (and so its group commit) with a good start.
                bad, good = await _bounded(asyncio.gather(call(), engine.execute(three_steps, 1), return_exceptions=True))
                assert isinstance(bad, InvalidRequest), (name, bad)
                assert good == 4, (name, good)

    run(main())


@pytest.mark.parametrize("name", ["", None, 3])
def test_signal_update_and_query_refuse_a_bad_name(tmp_path, name):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(idle)
            for call in (
                lambda: engine.signal(handle.id, name, 1),
                lambda: engine.update(handle.id, name),
                lambda: engine.query(handle.id, name),
                lambda: engine.signal_with_start(idle, signal=name, id=handle.id),
            ):
                bad, good = await _bounded(asyncio.gather(call(), engine.execute(three_steps, 1), return_exceptions=True))
                assert isinstance(bad, InvalidRequest), bad
                assert good == 4

    run(main())


def test_a_payload_naming_a_module_fails_that_request_only_and_imports_nothing(tmp_path, monkeypatch):
    """The shard's request path decodes client payloads: a type tag naming a module is a
    ``SerializationError`` for that request, nothing is imported, and the shard keeps serving."""
    import msgpack

    from weft_actors.errors import SerializationError
    from weft_actors.supervisor._shard_ops import ShardOps

    marker = tmp_path / "imported"
    (tmp_path / "side_effect_mod_xyz.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    evil = msgpack.packb(msgpack.ExtType(12, msgpack.packb(["side_effect_mod_xyz", "Thing", {}])))

    async def main():
        async with Engine(str(tmp_path / "db"), app=APP) as engine:
            ops = ShardOps(engine)
            handle = await engine.start(idle)
            for request in (
                {"op": "signal", "wid": handle.id, "name": "go", "payload": evil},
                {"op": "start", "workflow": "three_steps", "args": msgpack.packb([msgpack.ExtType(12, msgpack.packb(["side_effect_mod_xyz", "Thing", {}]))])},
            ):
                with pytest.raises(SerializationError, match="not registered"):
                    await _bounded(ops.dispatch(request))
            assert await _bounded(engine.execute(three_steps, 1)) == 4

    run(main())
    assert not marker.exists()
