"""The embedded Engine end to end on real LMDB: starts, results, signals, queries, errors."""

from __future__ import annotations

import asyncio
import socket

import pytest

from _support import eventually, run
from steps_app import three_steps
from weft_actors import Engine, workflow
from weft_actors.errors import (
    InvalidRequest,
    SerializationError,
    UnknownQuery,
    UnknownWorkflowType,
    WorkflowAlreadyExists,
    WorkflowClosed,
    WorkflowFailed,
    WorkflowNotFound,
)


@workflow
async def greeter(ctx, name: str) -> list:
    greetings = []
    ctx.on_query("count", lambda: len(greetings))
    while True:
        message = await ctx.wait_signal("greet")
        if message is None:
            return greetings
        greetings.append(f"{message}, {name}")


@workflow
async def uses_asyncio_sleep(ctx) -> None:
    await asyncio.sleep(0.01)


@workflow
async def returns_tuple(ctx, value):
    return (value, {1, 2}, b"raw")


APP = [three_steps, greeter, uses_asyncio_sleep, returns_tuple]


def test_three_step_workflow_returns_its_result(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(three_steps, 1, id="w1")
            assert await handle.result(timeout=5) == 4
            by_name = await engine.start("three_steps", 10)
            assert await by_name.result(timeout=5) == 13
            described = await handle.describe()
            assert described["status"] == "completed"
            assert described["owner"] is None  # the claim is released at the end
            assert [op["kind"] for op in described["history"]] == ["activity"] * 3
            assert all(op["outcome"] == "ok" for op in described["history"])

    run(main())


def test_payload_types_survive_the_round_trip(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(returns_tuple, ("a", 1))
            assert await handle.result(timeout=5) == (("a", 1), {1, 2}, b"raw")

    run(main())


def test_unknown_workflow_name_is_rejected(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            with pytest.raises(UnknownWorkflowType) as info:
                await engine.start("no_such_workflow")
            assert info.value.code == "unknown_workflow_type"

    run(main())


def test_duplicate_id_is_rejected_or_returned(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            first = await engine.start(greeter, "x", id="dup")
            with pytest.raises(WorkflowAlreadyExists):
                await engine.start(greeter, "x", id="dup")
            again = await engine.start(greeter, "x", id="dup", if_exists="return")
            assert again.run_id == first.run_id

    run(main())


def test_unencodable_argument_raises_serialization_error(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            with socket.socket() as sock, pytest.raises(SerializationError) as info:
                await engine.start(three_steps, sock)
            assert info.value.where == "workflow argument"
            assert "socket" in str(info.value)
            assert (await engine.list())["items"] == []  # nothing was created

    run(main())


def test_bad_ids_are_invalid_requests(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            for bad in ("", "a\x00b", "x" * 300, 42):
                with pytest.raises(InvalidRequest):
                    await engine.start(three_steps, 1, id=bad)

    run(main())


def test_signals_are_buffered_fifo_and_consumed_once(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(greeter, "Ada", id="g")
            for word in ("hello", "hi", "hey"):
                await handle.signal("greet", word)
            await eventually(lambda: engine.store.count("inbox") == 0)
            assert await handle.query("count") == 3
            await handle.signal("greet", None)
            assert await handle.result(timeout=5) == ["hello, Ada", "hi, Ada", "hey, Ada"]
            history = (await handle.describe())["history"]
            assert [op["kind"] for op in history] == ["signal"] * 4
            assert engine.store.count("inbox") == 0

    run(main())


def test_signal_to_finished_or_unknown_workflow_is_an_error(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            done = await engine.start(three_steps, 1)
            await done.result(timeout=5)
            with pytest.raises(WorkflowClosed) as info:
                await done.signal("anything", 1)
            assert info.value.code == "workflow_closed"
            with pytest.raises(WorkflowNotFound):
                await engine.get_handle("nobody").signal("x")
            with pytest.raises(WorkflowNotFound):
                await engine.get_handle("nobody").result(timeout=1)

    run(main())


def test_query_without_handler_is_unknown_query(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(greeter, "x")
            assert await handle.query("count") == 0
            with pytest.raises(UnknownQuery):
                await handle.query("nope")

    run(main())


def test_query_on_a_finished_workflow_replays_it(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(greeter, "x")
            await handle.signal("greet", "a")
            await handle.signal("greet", None)
            await handle.result(timeout=5)
            assert "g" not in engine.actors
            assert await handle.query("count") == 1

    run(main())


def test_awaiting_asyncio_inside_a_workflow_fails_it_clearly(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(uses_asyncio_sleep)
            with pytest.raises(WorkflowFailed) as info:
                await handle.result(timeout=5)
            assert "InvalidAwait" in info.value.type
            assert "only ctx operations may be awaited" in str(info.value)

    run(main())


def test_group_commit_uses_far_fewer_transactions_than_writes(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handles = await asyncio.gather(*(engine.start(three_steps, i) for i in range(500)))
            results = await asyncio.gather(*(h.result(timeout=10) for h in handles))
            assert results == [i + 3 for i in range(500)]
            stats = engine.stats()
            # 500 workflows x (start + 3 steps, the finish riding on the last one) = 2,000 writes.
            assert stats["writes_total"] >= 2000
            assert stats["commits_total"] * 20 < stats["writes_total"]
            assert engine.store.commits <= stats["commits_total"] + 5

    run(main())


def test_list_shows_workflows_with_status_and_type(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            done = await engine.start(three_steps, 1, id="done")
            await done.result(timeout=5)
            await engine.start(greeter, "x", id="waiting")
            everything = await engine.list()
            assert {(i["id"], i["status"], i["type"]) for i in everything["items"]} == {
                ("done", "completed", "three_steps"),
                ("waiting", "running", "greeter"),
            }
            assert everything["cursor"] is None
            running = await engine.list(status="running")
            assert [i["id"] for i in running["items"]] == ["waiting"]
            with pytest.raises(InvalidRequest):
                await engine.list(status="bogus")

    run(main())


def test_incoherent_heartbeat_and_ttl_are_rejected(tmp_path):
    for heartbeat, ttl in ((0, 3), (1, 1), (1, 2.5), (-1, 3)):
        with pytest.raises(ValueError):
            Engine(str(tmp_path), app=APP, heartbeat=heartbeat, ttl=ttl)
