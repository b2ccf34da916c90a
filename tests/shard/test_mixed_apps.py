"""Engines with different apps on one store: an engine never claims a workflow whose type it
does not register, on any path that claims one (a takeover, a delayed start firing, a child
created by its parent's step), so the workflow waits for an engine that runs it, which takes
it at its first pass, and runs it to the end; and engines that register different types
are warned about at registration.

On a fake clock with ``background=False``: every maintenance pass is a ``tick()``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors._placement import preferred
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(20)

HB, TTL = 0.5, 3.0


@workflow
async def common(ctx) -> str:
    return await ctx.wait_signal("go")


@workflow
async def only_b(ctx, tag: str) -> str:
    return f"{tag}: {await ctx.wait_signal('go')}"


@workflow
async def parent_of_b(ctx) -> str:
    return await ctx.child(only_b, "kid", id="kid-of-parent")


APP_A = [common, parent_of_b]
APP_B = [common, only_b]


def new_engine(path: Any, app: list, clock: FakeClock) -> Engine:
    return Engine(str(path), app=app, clock=clock, heartbeat=HB, ttl=TTL, background=False)


async def opened(path: Any, app: list, clock: FakeClock) -> Engine:
    engine = new_engine(path, app, clock)
    await engine.open()
    return engine


def id_preferring(engine: Engine, among: list[Engine], prefix: str) -> str:
    """A workflow id the rendezvous hash over all of ``among`` gives to ``engine``: without
    types in the picture, ``engine`` would be the one to take it."""
    ids = [each.engine_id for each in among]
    return next(wid for wid in (f"{prefix}-{i}" for i in range(1000)) if preferred(wid, ids) == engine.engine_id)


def holder(engine: Engine, wid: str) -> str | None:
    found = engine.store.get_holder(wid)
    return None if found is None else found[0]


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def no_replay_failures(caplog: pytest.LogCaptureFixture) -> None:
    """What an engine that took a workflow it cannot run would log (and retry for ever)."""
    assert [r.getMessage() for r in caplog.records if "replay failed" in r.getMessage() or "no workflow named" in r.getMessage()] == []


@pytest.mark.parametrize("how", ["crash", "stop"])
def test_a_takeover_leaves_a_workflow_to_the_engine_that_runs_its_type(tmp_path, caplog, how):
    async def main():
        clock = FakeClock()
        first = await opened(tmp_path, APP_B, clock)
        a = await opened(tmp_path, APP_A, clock)
        b = await opened(tmp_path, APP_B, clock)
        try:
            wid = id_preferring(a, [a, b], "taken")
            await first.start(only_b, "t", id=wid)
            if how == "crash":
                first.depose("simulated kill -9")  # nothing released: its lock file is let go
            else:
                await first.close()  # released: ownerless at once
            a.tick()  # the engine the hash prefers, which cannot run it, passes it over
            assert holder(a, wid) is None if how == "stop" else holder(a, wid) == first.engine_id
            assert wid not in a.actors
            b.tick()  # the engine that runs it takes it at its first pass, not a heartbeat later
            assert holder(b, wid) == b.engine_id and wid in b.actors
            await b.signal(wid, "go", "done")
            assert await b.get_handle(wid).result(timeout=5) == "t: done"
            no_replay_failures(caplog)
        finally:
            await a.close()
            await b.close()

    run(main())


def test_a_delayed_start_is_fired_by_an_engine_that_runs_its_type_and_no_later(tmp_path, caplog):
    async def main():
        clock = FakeClock()
        a = await opened(tmp_path, APP_A, clock)
        b = await opened(tmp_path, APP_B, clock)
        try:
            due, late = id_preferring(a, [a, b], "due"), id_preferring(a, [a, b], "late")
            await b.start(only_b, "due", id=due, start_delay=2.0)
            await b.start(only_b, "late", id=late, start_delay=1.0)
            clock.advance(2.0)  # one just due; the other overdue by more than a heartbeat: anyone's
            a.tick()
            await settle()
            for wid in (due, late):
                assert a.store.get_workflow(wid)["status"] == "pending" and holder(a, wid) is None
            b.tick()  # both, the one just due too: among the engines that run it, b is preferred
            await eventually(lambda: due in b.actors and late in b.actors)
            for wid in (due, late):
                assert holder(b, wid) == b.engine_id
                await b.signal(wid, "go", "fired")
                assert await b.get_handle(wid).result(timeout=5) == f"{wid.partition('-')[0]}: fired"
            no_replay_failures(caplog)
        finally:
            await a.close()
            await b.close()

    run(main())


def test_a_child_of_a_type_its_parents_engine_lacks_is_left_for_one_that_runs_it(tmp_path, caplog):
    async def main():
        clock = FakeClock()
        a = await opened(tmp_path, APP_A, clock)
        b = await opened(tmp_path, APP_B, clock)
        try:
            handle = await a.start(parent_of_b, id="parent")
            await eventually(lambda: a.store.get_workflow("kid-of-parent") is not None)
            assert holder(a, "kid-of-parent") is None and "kid-of-parent" not in a.actors
            a.tick()
            assert holder(a, "kid-of-parent") is None
            b.tick()
            assert holder(b, "kid-of-parent") == b.engine_id
            await b.signal("kid-of-parent", "go", "grown")
            assert await b.get_handle("kid-of-parent").result(timeout=5) == "kid: grown"
            a.tick()  # the child's ending is in the parent's inbox: the parent's feed poll
            assert await handle.result(timeout=5) == "kid: grown"
            no_replay_failures(caplog)
        finally:
            await a.close()
            await b.close()

    run(main())


def test_engines_that_register_different_types_are_warned_about_when_one_registers(tmp_path, caplog):
    async def main():
        clock = FakeClock()
        a = await opened(tmp_path, APP_A, clock)
        with caplog.at_level(logging.WARNING, logger="weft_actors.shard"):
            b = await opened(tmp_path, APP_B, clock)
            same = await opened(tmp_path, APP_B, clock)
            quiet = Engine(str(tmp_path), app=APP_B, clock=clock, heartbeat=HB, ttl=TTL, background=False, warn_type_mismatch=False)
            await quiet.open()
        try:
            assert a.store.engine(a.engine_id)["types"] == ["common", "parent_of_b"]
            assert a.store.engine(b.engine_id)["types"] == ["common", "only_b"]
            warnings = [r for r in caplog.records if getattr(r, "event", None) == "workflow_types_differ"]
            assert [(r.engine_id, r.engines) for r in warnings] == [(b.engine_id, [a.engine_id]), (same.engine_id, [a.engine_id])]
            assert warnings[0].levelno == logging.WARNING
            assert warnings[0].getMessage().startswith(
                f"engines on this store register different workflow types: engine {b.engine_id} runs [common, only_b]; "
                f"engine {a.engine_id}: they lack [only_b]; [parent_of_b] only they run. "
            )
        finally:
            for engine in (a, b, same, quiet):
                await engine.close()

    run(main())


def test_an_engine_record_without_types_counts_as_running_every_type(tmp_path, caplog):
    """Records written before engines recorded their types (or by a tool without an app)
    need no migration: nothing is known to differ, and such an engine may take anything."""
    async def main():
        clock = FakeClock()
        a = await opened(tmp_path, APP_A, clock)
        older = "ab" * 16
        a.store.register_engine(older, heartbeat=HB, ttl=TTL)
        assert "types" not in a.store.engine(older)
        with caplog.at_level(logging.WARNING, logger="weft_actors.shard"):
            b = await opened(tmp_path, APP_A, clock)
        try:
            assert [r for r in caplog.records if getattr(r, "event", None) == "workflow_types_differ"] == []
            live = b.maintenance.reclaimer.live_engines()
            assert older in live and older in b.maintenance.reclaimer.takers("only_b", live)
            assert b.engine_id not in b.maintenance.reclaimer.takers("only_b", live)
        finally:
            await a.close()
            await b.close()

    run(main())
