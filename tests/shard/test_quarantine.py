"""Poison workflows: a workflow that keeps losing its owners without committing progress is
quarantined after ``quarantine_after`` of them, stays terminable and cancellable, and runs
again once lifted. Owners are "lost" here by letting their leases expire on a fake clock."""

from __future__ import annotations

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


APP = [poison]
HEARTBEAT, TTL = 0.5, 1.5


def _engine(path, clock: FakeClock, **options) -> Engine:
    return Engine(str(path), app=APP, clock=clock, heartbeat=HEARTBEAT, ttl=TTL, background=False, **options)


async def _lose_owner(path, clock: FakeClock, engines: list[Engine], **options) -> Engine:
    """The current owner's lease runs out; a new engine takes its workflows over at open."""
    clock.advance(TTL + 3 * HEARTBEAT)  # expired: past expires_at + 2 heartbeats
    for old in engines:
        old.tick()  # its heartbeat finds it expired: deposed, it commits nothing more
    engine = _engine(path, clock, **options)
    await engine.open()
    engines.append(engine)
    await asyncio.sleep(0.05)  # let the taker's commits land
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

    def take(engine_id: str) -> int:
        (wid, holder, _), = store.reclaim_candidates(engine_id)
        return store.takeover(engine_id, [(wid, holder)])[wid]

    def lost() -> int:
        return (store.get_workflow("w") or {}).get("lost", {}).get("count", 0)

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
    take(e)
    assert lost() == 2
    store.close()


def test_a_stall_note_blames_the_workflow_it_names_and_spares_its_neighbours(tmp_path):
    """The watchdog of an engine whose loop stalled left a note naming the workflow on its
    loop: a takeover from it counts that workflow only, with the note's activity as reason."""
    clock = FakeClock()
    store = LmdbStore(str(tmp_path), clock=clock)
    from weft_actors.codec import encode_args
    from weft_actors.store import CreateWorkflow, stall_note_path, write_stall_note

    owner = "a" * 32
    store.register_engine(owner, heartbeat=HEARTBEAT, ttl=TTL)
    run_id = "11" * 16
    store.apply(owner, [CreateWorkflow(wid, "poison", encode_args(("k",)), run_id) for wid in ("culprit", "neighbour")])
    write_stall_note(stall_note_path(store.path, owner), {"wid": "culprit", "run_id": run_id, "kind": "activity", "name": "hangs", "seq": 4})
    clock.advance(TTL + 2)
    taker = "b" * 32
    store.register_engine(taker, heartbeat=HEARTBEAT, ttl=TTL)
    won = store.takeover(taker, [(wid, holder) for wid, holder, _ in store.reclaim_candidates(taker)])
    assert set(won) == {"culprit", "neighbour"} and all(won.values())
    assert store.get_workflow("culprit")["lost"]["count"] == 1
    assert store.get_workflow("culprit")["lost"]["reason"] == {"seq": 4, "kind": "activity", "name": "hangs"}
    assert "lost" not in store.get_workflow("neighbour")
    store.close()


def test_a_loss_while_the_store_refuses_commits_is_not_counted_against_the_workflow(tmp_path):
    """Store level: a workflow whose steps a full store refuses cannot progress, so a loss at
    the same mark with a refusal since the previous loss leaves the count alone (the store's
    doing, not the workflow's); with no refusal in between, the next loss counts again."""
    from weft_actors.codec import encode_args
    from weft_actors.errors import StorageFull
    from weft_actors.store import CreateWorkflow

    clock = FakeClock()
    store = LmdbStore(str(tmp_path), clock=clock, map_size=1 << 20)

    def register(name: str) -> str:
        engine_id = (name * 32)[:32]
        store.register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL)
        return engine_id

    def take(engine_id: str) -> None:
        wanted = [(wid, holder) for wid, holder, _ in store.reclaim_candidates(engine_id) if wid == "w"]
        assert store.takeover(engine_id, wanted)["w"] is not None

    def lost() -> int:
        return (store.get_workflow("w") or {}).get("lost", {}).get("count", 0)

    def fill_until_refused(engine_id: str) -> None:
        """Big workflows until the store is within its reserve: that growth is refused."""
        for i in range(64):
            [result] = store.apply(engine_id, [CreateWorkflow(f"big-{engine_id[0]}{i}", "poison", b"\x00" * (96 << 10), "00" * 16)])
            if isinstance(result, StorageFull):
                return
        raise AssertionError("the store never refused growth")

    a = register("a")
    store.apply(a, [CreateWorkflow("w", "poison", encode_args(("k",)), "00" * 16)])
    clock.advance(TTL + 2)
    b = register("b")
    take(b)
    assert lost() == 1
    fill_until_refused(b)  # refused: nothing of it commits, the time is kept in memory...
    store.heartbeat(b)  # ...and written by the next commit
    clock.advance(TTL + 2)
    c = register("c")
    take(c)
    assert lost() == 1  # the store refused commits since the last loss: not w's doing
    clock.advance(TTL + 2)
    d = register("d")
    take(d)
    assert lost() == 2  # the store refused nothing since: this loss counts
    clock.advance(TTL + 2)
    e = register("e")
    [refused] = store.apply(e, [CreateWorkflow("more", "poison", b"\x00" * (96 << 10), "00" * 16)])
    assert isinstance(refused, StorageFull)
    take(e)  # the taker's own refusal, written in the takeover before it judges
    assert lost() == 2
    store.close()
