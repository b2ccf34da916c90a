"""Flow control of workflow starts (``@workflow(concurrency=..., concurrency_key=...)``), on
real LMDB: past the limit a start waits, ``pending``, in a durable queue (priority first,
then FIFO) and starts when a running one ends, on whichever engine shares the store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import InvalidRequest
from weft_actors.store import check_store

pytestmark = pytest.mark.timeout(60)

entered: list[tuple[str, int]] = []
"""``(key, n)`` of every run that got past its first step, in that order (one process)."""


def _reset() -> None:
    entered.clear()


@activity
async def _note_entry(key: str, n: int) -> None:
    entered.append((key, n))


@workflow(concurrency=2, concurrency_key=lambda customer, n: customer)
async def charge(ctx, customer: str, n: int) -> int:
    await ctx.run(_note_entry, customer, n)
    await ctx.wait_signal("go")
    return n


@workflow(concurrency=1)
async def one_at_a_time(ctx, n: int) -> int:
    await ctx.run(_note_entry, "one", n)
    await ctx.wait_signal("go")
    return n


@workflow(concurrency=1)
async def brief(ctx, n: int) -> int:
    await ctx.run(_note_entry, "brief", n)
    return n


@workflow(concurrency=1)
async def continues(ctx, turns: int) -> int:
    await ctx.run(_note_entry, "continues", turns)
    if turns > 0:
        await ctx.wait_signal("go")
        return ctx.continue_as_new(turns - 1)
    return turns


@workflow
async def parent_of_three(ctx) -> list:
    return list(await ctx.all([ctx.child(brief, n) for n in range(3)]))


@workflow(concurrency=2, concurrency_key=lambda key: key)
async def keyed_by_anything(ctx, key: Any) -> None:
    return None


APP = [charge, one_at_a_time, brief, continues, parent_of_three, keyed_by_anything]


async def _statuses(engine: Engine, ids: list[str]) -> dict[str, dict[str, Any]]:
    return {wid: await engine.get_handle(wid).describe() for wid in ids}


def _running(described: dict[str, dict[str, Any]]) -> list[str]:
    return [wid for wid, d in described.items() if d["status"] == "running"]


def test_a_limit_of_two_per_key_runs_ten_starts_two_at_a_time_in_fifo_order(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            ids = [(await engine.start(charge, "ann", n, id=f"ann-{n}")).id for n in range(10)]
            await eventually(lambda: len(entered) == 2)
            described = await _statuses(engine, ids)
            assert _running(described) == ["ann-0", "ann-1"]
            waiting = [described[f"ann-{n}"] for n in range(2, 10)]
            assert all(d["status"] == "pending" and d["queued"] for d in waiting)
            assert [d["flow"]["position"] for d in waiting] == list(range(1, 9))
            assert waiting[0]["flow"] == {"key": "ann", "concurrency": 2, "priority": 0, "running": 2, "queued": True, "position": 1}
            # Another key has slots of its own.
            bob = await engine.start(charge, "bob", 0, id="bob-0")
            await eventually(lambda: ("bob", 0) in entered)
            await bob.signal("go")
            assert await bob.result(timeout=5) == 0
            peak = 0
            for n in range(10):  # let the oldest running one end, again and again
                await eventually(lambda: (sum(1 for key, _ in entered if key == "ann") >= min(10, n + 2)))
                described = await _statuses(engine, ids)
                running = _running(described)
                peak = max(peak, len(running))
                assert running and running[0] == f"ann-{n}"
                assert sum(1 for key, _ in entered if key == "ann") <= n + 2  # each holds at its wait_signal
                await engine.get_handle(f"ann-{n}").signal("go")
                assert await engine.get_handle(f"ann-{n}").result(timeout=5) == n
            assert peak == 2
            assert [n for key, n in entered if key == "ann"] == list(range(10))
        assert check_store(str(tmp_path), now=0.0) == []

    run(main())


def test_a_higher_priority_start_goes_first_and_describe_shows_its_place(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            first = await engine.start(one_at_a_time, 0, id="first")
            await eventually(lambda: len(entered) == 1)
            await engine.start(one_at_a_time, 1, id="low")
            await engine.start(one_at_a_time, 2, id="urgent", priority=5)
            await engine.start(one_at_a_time, 3, id="later")
            positions = {wid: (await engine.get_handle(wid).describe())["flow"]["position"] for wid in ("low", "urgent", "later")}
            assert positions == {"urgent": 1, "low": 2, "later": 3}
            await first.signal("go")
            for wid, count in (("urgent", 2), ("low", 3), ("later", 4)):
                await eventually(lambda: len(entered) == count)
                await engine.get_handle(wid).signal("go")
                await engine.get_handle(wid).result(timeout=5)
            assert [n for _, n in entered] == [0, 2, 1, 3]

    run(main())


def test_a_cancelled_or_terminated_queued_start_leaves_the_queue_and_frees_no_slot(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            first = await engine.start(one_at_a_time, 0, id="first")
            for n in (1, 2, 3):
                await engine.start(one_at_a_time, n, id=f"q{n}")
            await eventually(lambda: len(entered) == 1)
            await engine.cancel("q1")
            await engine.terminate("q2", reason="not needed")
            assert (await engine.get_handle("q1").describe())["status"] == "cancelled"
            assert (await engine.get_handle("q2").describe())["status"] == "terminated"
            q3 = await engine.get_handle("q3").describe()
            assert q3["status"] == "pending" and q3["flow"]["position"] == 1 and q3["flow"]["running"] == 1
            assert len(entered) == 1  # closing a queued start freed nothing
            await first.signal("go")
            await eventually(lambda: len(entered) == 2)
            assert entered[-1] == ("one", 3)
            await engine.get_handle("q3").signal("go")
            assert await engine.get_handle("q3").result(timeout=5) == 3
        assert check_store(str(tmp_path), now=0.0) == []

    run(main())


def test_the_limit_holds_across_two_engines_sharing_a_store(tmp_path):
    """Starts made on two engines count in one group; a slot freed on one goes to a start
    made on the other, which whichever engine runs the type starts."""
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as left, Engine(str(tmp_path), app=APP) as right:
            engines = [left, right]
            ids = []
            for n in range(6):
                ids.append((await engines[n % 2].start(charge, "shared", n, id=f"s{n}")).id)
            await eventually(lambda: len(entered) == 2)
            for n in range(6):
                await eventually(lambda: len(entered) >= min(6, n + 2))
                described = await _statuses(left, ids)
                assert len(_running(described)) <= 2
                await left.get_handle(f"s{n}").signal("go")
                assert await left.get_handle(f"s{n}").result(timeout=10) == n
            assert [n for _, n in entered] == list(range(6))
        assert check_store(str(tmp_path), now=0.0) == []

    run(main())


def test_the_queue_survives_a_restart(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            await engine.start(one_at_a_time, 0, id="first")
            for n in (1, 2):
                await engine.start(one_at_a_time, n, id=f"q{n}")
            await eventually(lambda: len(entered) == 1)
        async with Engine(str(tmp_path), app=APP) as engine:
            assert (await engine.get_handle("q1").describe())["flow"]["position"] == 1
            await engine.get_handle("first").signal("go")
            await engine.get_handle("first").result(timeout=10)
            for n in (1, 2):
                await eventually(lambda: ("one", n) in entered)
                await engine.get_handle(f"q{n}").signal("go")
                assert await engine.get_handle(f"q{n}").result(timeout=10) == n

    run(main())


def test_a_delayed_start_whose_time_comes_while_the_group_is_full_waits_in_the_queue(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP, heartbeat=0.05) as engine:
            first = await engine.start(one_at_a_time, 0, id="first")
            await eventually(lambda: len(entered) == 1)
            await engine.start(one_at_a_time, 1, id="delayed", start_delay=0.05)
            delayed = engine.get_handle("delayed")

            async def queued() -> bool:
                return (await delayed.describe())["queued"]

            deadline = asyncio.get_running_loop().time() + 5
            while not await queued():
                assert asyncio.get_running_loop().time() < deadline, "the delayed start never queued"
                await asyncio.sleep(0.02)
            assert (await delayed.describe())["status"] == "pending"
            await first.signal("go")
            await eventually(lambda: len(entered) == 2)
            await delayed.signal("go")
            assert await delayed.result(timeout=5) == 1

    run(main())


def test_children_of_a_limited_type_run_one_at_a_time(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(parent_of_three)
            assert await handle.result(timeout=10) == [0, 1, 2]
            assert [n for key, n in entered if key == "brief"] == [0, 1, 2]
        assert check_store(str(tmp_path), now=0.0) == []

    run(main())


def test_continue_as_new_keeps_the_slot(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            chain = await engine.start(continues, 1, id="chain")
            await eventually(lambda: len(entered) == 1)
            other = await engine.start(continues, 0, id="other")
            await chain.signal("go")
            await eventually(lambda: len(entered) == 2)  # the chain's next run, not "other"
            assert entered[-1] == ("continues", 0)
            assert await chain.result(timeout=5) == 0
            assert await other.result(timeout=5) == 0
            assert entered[-1] == ("continues", 0) and len(entered) == 3

    run(main())


def test_a_key_function_that_fails_refuses_only_its_own_start(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            for bad, words in (({"not": "hashable str"}, "must return a str"), ("x" * 300, "the limit is 256")):
                with pytest.raises(InvalidRequest, match=words) as info:
                    await engine.start(keyed_by_anything, bad, id="bad")
                assert info.value.code == "invalid_request"
            with pytest.raises(InvalidRequest, match="priority"):
                await engine.start(keyed_by_anything, "k", priority=128)
            with pytest.raises(InvalidRequest, match="priority"):
                await engine.start(keyed_by_anything, "k", priority=True)
            assert (await engine.list())["items"] == []
            ok = await engine.start(keyed_by_anything, "k")
            assert await ok.result(timeout=5) is None

    run(main())


def test_the_decorator_refuses_a_limit_that_means_nothing():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="concurrency"):
            workflow(concurrency=bad)
    with pytest.raises(ValueError, match="concurrency_key needs concurrency"):
        workflow(concurrency_key=lambda: "k")


def test_the_checker_finds_a_wrong_count_and_a_lost_queue_entry(tmp_path):
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            await engine.start(one_at_a_time, 0, id="first")
            await engine.start(one_at_a_time, 1, id="waits")
            await eventually(lambda: len(entered) == 1)
        assert check_store(str(tmp_path), now=0.0) == []

    run(main())
    from weft_actors.store import LmdbStore
    from weft_actors.store._flow import QUEUE_PREFIX, RUNNING_PREFIX

    store = LmdbStore(str(tmp_path))
    try:
        with store.env.begin(write=True) as txn:
            cursor = txn.cursor(db=store.dbs.meta)
            keys = [bytes(key) for key in cursor.iternext(values=False) if bytes(key).startswith((QUEUE_PREFIX, RUNNING_PREFIX))]
            for key in keys:
                txn.delete(key, db=store.dbs.meta)
    finally:
        store.close()
    kinds = sorted(problem.kind for problem in check_store(str(tmp_path), now=0.0))
    assert kinds == ["flow_count_mismatch", "flow_count_mismatch", "flow_queued_lost"]  # running, and queued


def test_a_slot_freed_by_an_engine_that_cannot_run_the_type_goes_to_one_that_can(tmp_path):
    """A terminate committed by an engine without the type promotes the head of the queue;
    the engine that runs the type starts it by its maintenance pass (a due delayed start)."""
    _reset()

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP, heartbeat=0.1) as runner, Engine(str(tmp_path), app=[], heartbeat=0.1) as operator:
            await runner.start(one_at_a_time, 0, id="first")
            await runner.start(one_at_a_time, 1, id="next")
            await eventually(lambda: len(entered) == 1)
            await operator.terminate("first", reason="make room")
            await eventually(lambda: len(entered) == 2)
            assert (await runner.get_handle("next").describe())["owner"] == runner.engine_id
            await runner.get_handle("next").signal("go")
            assert await runner.get_handle("next").result(timeout=5) == 1
        assert check_store(str(tmp_path), now=0.0) == []

    run(main())


def test_the_console_shows_where_a_queued_workflow_stands():
    from weft_actors.console._pages import workflow_page

    flow = {"key": "ann", "concurrency": 2, "priority": 5, "running": 2, "queued": True, "position": 3}
    page = workflow_page({"id": "w", "type": "charge", "status": "pending", "queued": True, "flow": flow, "ended": None}, now=0.0)
    assert '<span id="queued">queued: position 3</span> (priority 5; key ann, 2 of 2 running)' in page
    assert "<dt>flow</dt>" not in page  # shown once, in its own words
    running = workflow_page({"id": "w", "status": "running", "flow": {**flow, "queued": False, "position": None}, "ended": None}, now=0.0)
    assert "key ann, 2 of 2 running" in running and "queued:" not in running
