"""Poison workflows: a workflow charged with ``quarantine_after`` lost owners without
committing progress is quarantined, stays terminable and cancellable, and runs again once
lifted. Owners are "lost" here by letting their leases expire on a fake clock; a loss is
charged to a workflow only on evidence (a stall note naming it, as the lost owner's watchdog
leaves one), never because it was merely in flight."""

from __future__ import annotations

import os

import asyncio

import pytest

from _support import run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import InvalidRequest, WorkflowCancelled, WorkflowClosed, WorkflowNotFound, WorkflowTerminated
from weft_actors.store import LmdbStore, StepCommit, check_store
from weft_actors.testing import FakeClock

GATE: dict[str, asyncio.Event] = {}


@activity
async def hangs(key: str) -> str:
    """Never returns while its gate is shut: its owner is lost (by the test) while it runs."""
    await GATE[key].wait()
    return f"{key} done"


@activity
async def quick(i: int) -> int:
    return i


@workflow
async def poison(ctx, key: str):
    first = await ctx.run(quick, 1)
    return [first, await ctx.run(hangs, key)]


@workflow
async def waits_for_close(ctx):
    """Parked on a condition and on a signal: neither is recorded until it resolves."""
    state = {"closed": False}
    ctx.on_signal("close", lambda _: state.update(closed=True))
    await ctx.run(quick, 1)
    await ctx.wait_condition(lambda: state["closed"])
    return await ctx.wait_signal("last")


APP = [poison, waits_for_close]
HEARTBEAT, TTL = 0.5, 1.5


def _engine(path, clock: FakeClock, **options) -> Engine:
    return Engine(str(path), app=APP, clock=clock, heartbeat=HEARTBEAT, ttl=TTL, background=False, **options)


def _stalled_on(engine: Engine, wid: str) -> None:
    """Leave the stall note ``engine``'s watchdog leaves when ``wid``'s activity blocks its loop."""
    from weft_actors.store import stall_note_path, write_stall_note

    run_id = engine.store.get_workflow(wid)["run_id"]
    write_stall_note(stall_note_path(engine.store.path, engine.engine_id), {"wid": wid, "run_id": run_id, "kind": "activity", "name": "hangs", "seq": 1})


async def _lose_owner(path, clock: FakeClock, engines: list[Engine], settle: float = 0.05, blame: str | None = None, **options) -> Engine:
    """The current owner's lease runs out (after a stall of ``blame``'s, if given); a new
    engine takes its workflows over at open (and, for ``settle`` seconds, commits what it
    does: 0 for an owner lost at once)."""
    if blame is not None:
        _stalled_on(engines[-1], blame)
    clock.advance(TTL + 3 * HEARTBEAT)  # expired: past expires_at + 2 heartbeats
    for old in engines:
        old.tick()  # its heartbeat finds it expired: deposed, it commits nothing more
    engine = _engine(path, clock, **options)
    await engine.open()
    engines.append(engine)
    if settle:
        await asyncio.sleep(settle)  # let the taker's commits land
    return engine


async def _quarantined(tmp_path, clock, key, **options) -> tuple[list[Engine], str]:
    GATE[key] = asyncio.Event()
    first = _engine(tmp_path, clock, **options)
    await first.open()
    engines = [first]
    handle = await first.start(poison, key, id=key)
    await asyncio.sleep(0.05)
    for _ in range(options.get("quarantine_after", 1)):
        await _lose_owner(tmp_path, clock, engines, blame=key, **options)
    return engines, handle.id


def test_a_workflow_that_keeps_losing_its_owners_is_quarantined_with_its_reason(tmp_path, caplog):
    async def main():
        clock = FakeClock()
        engines, wid = await _quarantined(tmp_path, clock, "q1")
        last = engines[-1]
        described = await last.describe(wid)
        assert described["status"] == "quarantined"
        assert described["owner"] is None
        assert described["lost_owners"]["count"] == 1
        assert described["lost_owners"]["reason"] == "op #1 activity 'hangs'"
        assert [item["id"] for item in (await last.list(status="quarantined"))["items"]] == [wid]
        stats = last.stats()
        assert stats["quarantined_workflows"] == 1 and stats["workflows_quarantined_total"] == 1
        assert wid not in last.actors
        assert check_store(str(tmp_path), clock.now()) == []  # parked: no holder, no reclaim index entry
        with pytest.raises(InvalidRequest, match="quarantined"):
            await last.query(wid, "anything")
        # It stays parked: later passes (and later engines) do not take it.
        clock.advance(HEARTBEAT)
        last.tick()
        assert (await last.describe(wid))["status"] == "quarantined"
        records = [r for r in caplog.records if "quarantined" in r.getMessage() and r.levelname == "ERROR"]
        assert records and wid in records[0].getMessage() and "poison" in records[0].getMessage() and "'hangs'" in records[0].getMessage()
        await last.terminate(wid, "poison")
        with pytest.raises(WorkflowTerminated):
            await last.result(wid, timeout=1)
        assert last.store.count_quarantined() == 0
        for engine in engines:
            await engine.close()

    run(main())


def test_a_quarantined_workflow_can_be_cancelled(tmp_path):
    async def main():
        clock = FakeClock()
        engines, wid = await _quarantined(tmp_path, clock, "q2")
        last = engines[-1]
        assert (await last.describe(wid))["status"] == "quarantined"
        await last.cancel(wid)
        with pytest.raises(WorkflowCancelled):
            await last.result(wid, timeout=1)
        assert (await last.describe(wid))["status"] == "cancelled"
        for engine in engines:
            await engine.close()

    run(main())


def test_lifting_a_quarantine_lets_a_live_engine_run_it_to_the_end(tmp_path):
    async def main():
        clock = FakeClock()
        engines, wid = await _quarantined(tmp_path, clock, "q3", quarantine_after=2)
        last = engines[-1]
        assert (await last.describe(wid))["status"] == "quarantined"
        with pytest.raises(WorkflowNotFound):
            await last.lift_quarantine(wid + "-x")
        GATE["q3"].set()  # the fix is deployed
        await last.get_handle(wid).lift_quarantine()
        assert (await last.describe(wid))["status"] == "running"
        last.tick()  # its reclaim pass (a hinted one, with a background engine) takes it
        assert await last.result(wid, timeout=5) == [1, "q3 done"]
        described = await last.describe(wid)
        assert described["status"] == "completed" and described["lost_owners"] is None
        with pytest.raises(WorkflowClosed):
            await last.lift_quarantine(wid)  # no longer quarantined
        for engine in engines:
            await engine.close()

    run(main())


def test_only_losses_that_name_the_workflow_count_and_progress_or_a_release_resets_nothing_else(tmp_path):
    """Store level: the count grows only over takeovers from lost owners whose stall note
    names the workflow, at the same progress mark; a loss with no note, or a note naming
    another workflow, counts nothing; a release (no holder) is not a loss; a commit in
    between starts the count again."""
    from weft_actors.codec import encode_args
    from weft_actors.store import CreateWorkflow, stall_note_path, write_stall_note

    clock = FakeClock()
    store = LmdbStore(str(tmp_path), clock=clock)
    run_id = "00" * 16

    def register(name: str) -> str:
        engine_id = (name * 32)[:32]
        store.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
        return engine_id

    def take(engine_id: str) -> int:
        (wid, holder, _), = store.reclaim_candidates(engine_id)
        return store.takeover(engine_id, [(wid, holder)])[wid]

    def stalled(engine_id: str, wid: str = "w") -> None:
        write_stall_note(stall_note_path(store.path, engine_id), {"wid": wid, "run_id": run_id, "kind": "activity", "name": "hangs", "seq": 0})

    def lost() -> int:
        return (store.get_workflow("w") or {}).get("lost", {}).get("count", 0)

    a = register("a")
    store.apply(a, [CreateWorkflow("w", "poison", encode_args(("k",)), run_id)])
    stalled(a)
    clock.advance(TTL + 2)
    b = register("b")
    epoch = take(b)
    assert lost() == 1
    [done] = store.apply(b, [StepCommit("w", epoch, run_id, ops=((0, b"\x80"),))])  # progress
    assert done is None
    stalled(b)
    clock.advance(TTL + 2)
    c = register("c")
    take(c)
    assert lost() == 1  # progress in between: the run starts counting again
    clock.advance(TTL + 2)
    d = register("d")
    take(d)  # c left no note: its loss names nobody
    assert lost() == 1
    stalled(d, "another")
    clock.advance(TTL + 2)
    e = register("e")
    take(e)  # d's note names another workflow
    assert lost() == 1
    store.release_engine(e)  # graceful: no holder left, not a loss
    f = register("f")
    take(f)
    assert lost() == 1
    stalled(f)
    clock.advance(TTL + 2)
    g = register("0")
    take(g)
    assert lost() == 2
    store.close()


def _owning(store: LmdbStore, owner: str, run_id: str, *wids: str) -> None:
    """``owner`` registered, running ``wids`` (type ``poison``, run ``run_id``)."""
    from weft_actors.codec import encode_args
    from weft_actors.store import CreateWorkflow

    store.register_engine(owner, heartbeat=HEARTBEAT, ttl=TTL)
    store.apply(owner, [CreateWorkflow(wid, "poison", encode_args(("k",)), run_id) for wid in wids])


def _taken_over_after_expiry(store: LmdbStore, clock: FakeClock, taker: str) -> dict:
    """Past the owner's lease, ``taker`` registers and takes every candidate."""
    clock.advance(TTL + 2)
    store.register_engine(taker, heartbeat=HEARTBEAT, ttl=TTL)
    return store.takeover(taker, [(wid, holder) for wid, holder, _ in store.reclaim_candidates(taker)])


def test_a_stall_note_blames_the_workflow_it_names_and_spares_its_neighbours(tmp_path):
    """The watchdog of an engine whose loop stalled left a note naming the workflow on its
    loop: a takeover from it counts that workflow only, with the note's activity as reason."""
    from weft_actors.store import stall_note_path, write_stall_note

    clock = FakeClock()
    store = LmdbStore(str(tmp_path), clock=clock)
    owner, run_id = "a" * 32, "11" * 16
    _owning(store, owner, run_id, "culprit", "neighbour")
    write_stall_note(stall_note_path(store.path, owner), {"wid": "culprit", "run_id": run_id, "kind": "activity", "name": "hangs", "seq": 4})
    won = _taken_over_after_expiry(store, clock, "b" * 32)
    assert set(won) == {"culprit", "neighbour"} and all(won.values())
    assert store.get_workflow("culprit")["lost"]["count"] == 1
    assert store.get_workflow("culprit")["lost"]["reason"] == {"seq": 4, "kind": "activity", "name": "hangs"}
    assert "lost" not in store.get_workflow("neighbour")
    store.close()


def test_a_stall_note_the_data_directory_refuses_is_kept_in_memory_and_still_spares_the_neighbours(tmp_path):
    """A read-only (or full) data directory refuses the watchdog's note: it goes to this
    machine's memory (``spare_note_path``) instead, where the taker finds it, so the owner's
    loss still blames the stalled workflow, not every workflow that was in flight with it."""
    import shutil

    from weft_actors.store import stall_note_path, write_stall_note
    from weft_actors.store._quarantine import spare_note_path

    clock = FakeClock()
    store = LmdbStore(str(tmp_path), clock=clock)
    owner, run_id = "c" * 32, "22" * 16
    _owning(store, owner, run_id, "stalls-it", "bystander")
    path = stall_note_path(store.path, owner)
    os.makedirs(path)  # a directory where the note goes: refused, as a read-only one would
    try:
        write_stall_note(path, {"wid": "stalls-it", "run_id": run_id, "kind": "activity", "name": "hangs", "seq": 0, "at": 1.0})
        assert os.path.exists(spare_note_path(path))
        won = _taken_over_after_expiry(store, clock, "d" * 32)
        assert set(won) == {"stalls-it", "bystander"}
        assert store.get_workflow("stalls-it")["lost"]["reason"] == {"seq": 0, "kind": "activity", "name": "hangs"}
        assert "lost" not in store.get_workflow("bystander")
    finally:
        os.rmdir(path)
        shutil.rmtree(os.path.dirname(spare_note_path(path)), ignore_errors=True)
        store.close()


def test_a_workflow_whose_owners_are_lost_during_its_long_activity_is_never_quarantined(tmp_path):
    """Owners lost one after the other (killed from outside, their hosts gone) while the
    workflow waits on a long activity: nothing names it, so however many are lost, and
    whatever ``quarantine_after`` is, it is not quarantined, and it completes once the
    activity does."""

    async def main():
        clock = FakeClock()
        GATE["long"] = asyncio.Event()
        first = _engine(tmp_path, clock, quarantine_after=3)
        await first.open()
        engines = [first]
        handle = await first.start(poison, "long", id="long")
        await asyncio.sleep(0.05)
        for _ in range(4):
            await _lose_owner(tmp_path, clock, engines, quarantine_after=3)
        last = engines[-1]
        described = await last.describe("long")
        assert described["status"] == "running" and described["lost_owners"] is None
        GATE["long"].set()
        assert await last.result(handle.id, timeout=5) == [1, "long done"]
        for engine in engines:
            await engine.close()

    run(main())


def test_a_workflow_parked_on_a_condition_or_signal_is_not_blamed_for_lost_owners(tmp_path):
    """A wait on a condition or a signal records nothing until it resolves, so the op log of a
    parked workflow looks like one running its own code; but no lost owner's loop was held by
    it, so losing owner after owner, one after the other or with time to replay it in
    between, never quarantines it (no evidence against it)."""

    async def main():
        clock = FakeClock()
        first = _engine(tmp_path, clock)
        await first.open()
        engines = [first]
        handle = await first.start(waits_for_close, id="parked")
        await asyncio.sleep(0.05)
        for _ in range(4):  # a cascade: each taker is lost before it commits anything
            await _lose_owner(tmp_path, clock, engines, settle=0)
        await asyncio.sleep(0.05)
        for _ in range(3):
            await _lose_owner(tmp_path, clock, engines)
        last = engines[-1]
        assert (await last.describe("parked"))["status"] == "running"
        await last.signal("parked", "close", None)
        await asyncio.sleep(0.05)
        for _ in range(5):
            await _lose_owner(tmp_path, clock, engines)
        last = engines[-1]
        assert (await last.describe("parked"))["status"] == "running"
        await last.signal("parked", "last", "done")
        assert await last.result(handle.id, timeout=5) == "done"
        for engine in engines:
            await engine.close()

    run(main())
