"""Poison workflows: a workflow that keeps losing its owners without committing progress is
quarantined after ``quarantine_after`` of them, stays terminable and cancellable, and runs
again once lifted. Owners are "lost" here by letting their leases expire on a fake clock."""

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


async def _lose_owner(path, clock: FakeClock, engines: list[Engine], settle: float = 0.05, **options) -> Engine:
    """The current owner's lease runs out; a new engine takes its workflows over at open
    (and, for ``settle`` seconds, commits what it does: 0 for an owner lost at once)."""
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
    for _ in range(options.get("quarantine_after", 3)):
        await _lose_owner(tmp_path, clock, engines, **options)
    return engines, handle.id


def test_a_workflow_that_keeps_losing_its_owners_is_quarantined_with_its_reason(tmp_path, caplog):
    async def main():
        clock = FakeClock()
        engines, wid = await _quarantined(tmp_path, clock, "q1")
        last = engines[-1]
        described = await last.describe(wid)
        assert described["status"] == "quarantined"
        assert described["owner"] is None
        assert described["lost_owners"]["count"] == 3
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


def test_graceful_releases_and_progress_do_not_count_as_lost_owners(tmp_path):
    """Store level: the count grows only over takeovers from lost owners with the same
    progress mark; a release (no holder) is not a loss, and a commit in between resets it."""
    clock = FakeClock()
    store = LmdbStore(str(tmp_path), clock=clock)
    from weft_actors.codec import encode_args
    from weft_actors.store import CreateWorkflow

    def register(name: str) -> str:
        engine_id = (name * 32)[:32]
        store.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
        return engine_id

    def take(engine_id: str, replay: bool = True) -> int:
        """Take ``w`` over and, as a taker's replay does, note that it was seen running."""
        (wid, holder, _), = store.reclaim_candidates(engine_id)
        epoch = store.takeover(engine_id, [(wid, holder)])[wid]
        if replay:
            noted = {**store.get_workflow("w")["lost"], "seen": epoch}
            assert store.apply(engine_id, [StepCommit("w", epoch, "00" * 16, fields={"lost": noted})]) == [None]
        return epoch

    def lost(field: str = "count") -> int:
        return (store.get_workflow("w") or {}).get("lost", {}).get(field, 0)

    a = register("a")
    [created] = store.apply(a, [CreateWorkflow("w", "poison", encode_args(("k",)), "00" * 16)])
    clock.advance(TTL + 2)
    b = register("b")
    epoch = take(b)
    assert lost() == 1
    [done] = store.apply(b, [StepCommit("w", epoch, "00" * 16, ops=((0, b"\x80"),))])  # progress
    assert done is None
    clock.advance(TTL + 2)
    c = register("c")
    take(c)
    assert lost() == 1  # progress in between: the run starts counting again
    clock.advance(TTL + 2)
    d = register("d")
    take(d)
    assert lost() == 2
    store.release_engine(d)  # graceful: no holder left, not a loss
    e = register("e")
    take(e, replay=False)
    assert lost() == 2
    clock.advance(TTL + 2)
    f = register("f")
    take(f)  # e was lost before it replayed w: no evidence, the loss is unconfirmed
    assert (lost(), lost("unseen")) == (2, 1)
    clock.advance(TTL + 2)
    g = register("0")
    take(g)
    assert (lost(), lost("unseen")) == (3, 1)
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


def test_a_loss_while_the_store_refuses_commits_is_not_counted_against_the_workflow(tmp_path):
    """Store level: a workflow whose steps a full store refuses cannot progress, so a loss at
    the same mark with a refusal since the previous loss leaves the count alone (the store's
    doing, not the workflow's); with room again and no refusal since, the next loss counts."""
    from weft_actors.codec import encode_args
    from weft_actors.errors import StorageFull
    from weft_actors.store import CloseWorkflow, CreateWorkflow, PurgeWorkflow

    clock = FakeClock()
    store = LmdbStore(str(tmp_path), clock=clock, map_size=1 << 20)

    def register(name: str) -> str:
        engine_id = (name * 32)[:32]
        store.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
        return engine_id

    def take(engine_id: str) -> int:
        wanted = [(wid, holder) for wid, holder, _ in store.reclaim_candidates(engine_id) if wid == "w"]
        epoch = store.takeover(engine_id, wanted)["w"]
        assert epoch is not None
        return epoch

    def replayed(engine_id: str, epoch: int) -> list:
        """What a taker's replay commits first: that it has seen ``w`` (refused while full)."""
        noted = {**store.get_workflow("w")["lost"], "seen": epoch}
        return store.apply(engine_id, [StepCommit("w", epoch, "00" * 16, fields={"lost": noted})])

    def lost() -> int:
        return (store.get_workflow("w") or {}).get("lost", {}).get("count", 0)

    def fill_until_refused(engine_id: str) -> list[str]:
        """Big workflows until the store is within its reserve: that growth is refused."""
        made = []
        for i in range(64):
            wid = f"big-{engine_id[0]}{i}"
            [result] = store.apply(engine_id, [CreateWorkflow(wid, "poison", b"\x00" * (96 << 10), "00" * 16)])
            if isinstance(result, StorageFull):
                return made
            made.append(wid)
        raise AssertionError("the store never refused growth")

    a = register("a")
    store.apply(a, [CreateWorkflow("w", "poison", encode_args(("k",)), "00" * 16)])
    clock.advance(TTL + 2)
    b = register("b")
    assert replayed(b, take(b)) == [None]
    assert lost() == 1
    big = fill_until_refused(b)  # refused: nothing of it commits, the time is kept in memory...
    store.heartbeat(b)  # ...not written by a heartbeat, but by the takeover before it judges
    clock.advance(TTL + 2)
    c = register("c")
    epoch = take(c)
    assert lost() == 1  # the store refused commits since the last loss: not w's doing
    [refused] = replayed(c, epoch)
    assert isinstance(refused, StorageFull)  # nor can its taker note anything
    # Closes and purges commit within the reserve, and make room.
    for wid in big:
        [closed] = store.apply(c, [CloseWorkflow(wid, "terminated")])
        assert closed["status"] == "terminated"
        store.apply(c, [PurgeWorkflow(wid)])
    assert not store.within_reserve()
    assert replayed(c, epoch) == [None]
    clock.advance(TTL + 2)
    d = register("d")
    assert replayed(d, take(d)) == [None]
    assert lost() == 1  # c's first note was refused after c took it: still the store's doing
    clock.advance(TTL + 2)
    e = register("e")
    assert replayed(e, take(e)) == [None]
    assert lost() == 2  # room, and no refusal since d took it: this loss counts
    clock.advance(1.0)
    fill_until_refused(e)
    clock.advance(TTL + 2)
    f = register("f")
    take(f)  # the refusal, still only in this process's memory, is written by the takeover first
    assert lost() == 2
    store.close()


def test_a_workflow_parked_on_a_condition_or_signal_is_not_blamed_for_lost_owners(tmp_path):
    """A wait on a condition or a signal records nothing until it resolves, so the op log of a
    parked workflow looks like one running its own code. Its takers note what it waits on
    before anything else, so losing owner after owner does not quarantine it; nor do owners
    lost one after the other before any could note it (no evidence against it)."""

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
