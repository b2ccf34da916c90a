"""Storage full: with a tiny LMDB map, a burst of starts gets ``StorageFull`` for whatever could
not be committed; everything acknowledged stays readable and later finishes; reads keep
working; and the engine takes new work again once purge or retention frees space.

LMDB reuses a freed page only once the transaction that freed it has committed and no reader
still sees an older snapshot; the engine's reads are short, so the next transactions after a
purge find the room."""

from __future__ import annotations

import asyncio
import traceback

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import StorageFull, WeftError
from weft_actors.store import check_store

MAP_SIZE = 1 << 20  # holds the filler below and several hundred starts, then fills up
BLOB = "x" * 2000


@activity
async def echo(value: str) -> str:
    return value


@workflow
async def filler(ctx, blob: str, steps: int) -> int:
    """Leaves ``steps`` op records of ``len(blob)`` bytes each in its history."""
    total = 0
    for _ in range(steps):
        total += len(await ctx.run(echo, blob))
    return total


@workflow
async def waiter(ctx, n: int) -> list:
    ctx.on_query("n", lambda: n)
    return [n, await ctx.wait_signal("go")]


@workflow
async def quick(ctx, n: int) -> int:
    return len(await ctx.run(echo, "q" * n))


APP = [filler, waiter, quick]


async def _burst(engine: Engine, prefix: str, total: int, chunk: int = 25) -> tuple[list, list]:
    """Starts in chunks (each chunk lands in one group commit): the acknowledged handles and
    the errors, stopping a few chunks after the first refusal."""
    acked: list = []
    errors: list = []
    refused_chunks = 0
    for first in range(0, total, chunk):
        calls = []
        for i in range(first, min(first + chunk, total)):
            if i % 2:
                calls.append(engine.start(quick, i, id=f"{prefix}-{i}"))
            else:
                calls.append(engine.start(waiter, i, id=f"{prefix}-{i}"))
        results = await asyncio.gather(*calls, return_exceptions=True)
        acked += [r for r in results if not isinstance(r, BaseException)]
        failed = [r for r in results if isinstance(r, BaseException)]
        errors += failed
        if failed:
            refused_chunks += 1
            if refused_chunks >= 3:
                break
    return acked, errors


def test_a_burst_fills_the_store_and_everything_acknowledged_survives_and_finishes(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, map_size=MAP_SIZE, heartbeat=0.1, ttl=0.5) as engine:
            fillers = [await engine.start(filler, BLOB, 1, id=f"f{i}") for i in range(40)]
            assert [await h.result(timeout=5) for h in fillers] == [2000] * 40

            acked, errors = await _burst(engine, "b", 5000)
            assert len(acked) >= 200, f"only {len(acked)} starts fit: the map is too small for this test"
            assert errors, "the store never filled up"
            assert all(isinstance(e, StorageFull) for e in errors), {type(e).__name__ for e in errors}
            assert "store is full" in str(errors[0])
            acked_ids = {h.id for h in acked}

            # Reads keep working on a full store, and show every acknowledged start.
            for h in acked:
                described = await h.describe()
                assert described["status"] in ("running", "completed"), described
            assert await acked[0].query("n") == 0
            listed, cursor = set(), None
            while True:
                page = await engine.list(limit=500, cursor=cursor)
                listed |= {item["id"] for item in page["items"]}
                cursor = page["cursor"]
                if cursor is None:
                    break
            assert acked_ids <= listed
            refused = listed - acked_ids - {h.id for h in fillers}
            assert not refused, f"refused starts left records: {sorted(refused)[:5]}"
            assert await fillers[0].result(timeout=1) == 2000
            assert engine.state == "running"

            # Purging the finished fillers frees room: new starts succeed again.
            for h in fillers:
                await engine.purge(h.id)
            again = [await engine.start(quick, 5, id=f"again-{i}") for i in range(20)]
            assert [await h.result(timeout=5) for h in again] == [5] * 20

            # Every acknowledged workflow finishes, including the ones whose steps failed for
            # lack of room while the store was full (they are driven again).
            for h in acked:
                if h.id.startswith("b-") and int(h.id[2:]) % 2 == 0:
                    await h.signal("go", h.id)
            for h in acked:
                n = int(h.id[2:])
                expected = n if n % 2 else [n, h.id]
                assert await h.result(timeout=10) == expected
            assert engine.state == "running"
        assert check_store(str(tmp_path), 0.0) == []

    run(main())


def test_retention_frees_room_in_a_full_store(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, map_size=MAP_SIZE, prune_interval=3600) as engine:
            histories = [await engine.start(filler, BLOB, 5, id=f"h{i}") for i in range(20)]
            assert [await h.result(timeout=5) for h in histories] == [10000] * 20
            acked, errors = await _burst(engine, "r", 5000)
            assert errors and all(isinstance(e, StorageFull) for e in errors)
            # Retention: finished workflows keep record and result, their op logs go. In a full
            # store the prune's own transactions shrink until they fit.
            engine.retention = 0.0
            engine.maintenance.prune()
            await eventually(lambda: engine.stats()["histories_pruned_total"] >= 20, timeout=10)
            assert await histories[0].result(timeout=1) == 10000
            more = [await engine.start(quick, 3, id=f"more-{i}") for i in range(40)]
            assert [await h.result(timeout=5) for h in more] == [3] * 40
            for h in acked:
                if int(h.id[2:]) % 2:
                    assert await h.result(timeout=10) == int(h.id[2:])

    run(main())


def test_a_full_store_fails_a_batch_whole_and_answers_nothing_as_success(tmp_path):
    # One group commit that cannot fit fails every intent in it with StorageFull; nothing of
    # it is readable afterwards, and smaller commits afterwards succeed.
    async def main():
        async with Engine(str(tmp_path), app=APP, map_size=MAP_SIZE) as engine:
            big = await asyncio.gather(*[engine.start(filler, BLOB, 0, id=f"x{i}") for i in range(600)], return_exceptions=True)
            assert all(isinstance(r, StorageFull) for r in big), {type(r).__name__ for r in big}
            # Each caller raised an error of its own: one instance raised 600 times gathers
            # every raise's frames (tracebacks 900 frames long, seconds to format or trace).
            assert len({id(r) for r in big}) == len(big)
            assert max(len(traceback.extract_tb(r.__traceback__)) for r in big) < 20
            assert engine.store.get_workflow("x0") is None and engine.store.get_workflow("x599") is None
            small = await engine.start(quick, 1, id="small")
            assert await small.result(timeout=5) == 1

    run(main())


def test_storage_full_is_a_weft_error_with_a_stable_code():
    assert issubclass(StorageFull, WeftError) and StorageFull.code == "storage_full"


RUNS: dict[str, int] = {}
GATE: dict[str, asyncio.Event] = {}


@activity
async def counted(tag: str) -> str:
    """Counts its executions; the first waits for ``GATE[tag]``."""
    RUNS[tag] = RUNS.get(tag, 0) + 1
    gate = GATE.get(tag)
    if gate is not None and RUNS[tag] == 1:
        await gate.wait()
    return tag


@workflow
async def one_counted(ctx, tag: str) -> str:
    return await ctx.run(counted, tag)


def test_a_step_refused_for_lack_of_room_waits_for_room_and_its_activity_is_not_rerun_meanwhile(tmp_path):
    """While the store is within its reserve, a workflow whose step was refused is not driven
    again every heartbeat (re-running its activity each time): it waits for room, then runs on,
    with the activity's outcome that could not be committed, not a second run of it."""

    async def main():
        RUNS.clear()
        GATE["t"] = asyncio.Event()
        async with Engine(str(tmp_path), app=[*APP, one_counted], map_size=MAP_SIZE, heartbeat=0.1, ttl=0.5) as engine:
            gated = await engine.start(one_counted, "t", id="gated")
            await eventually(lambda: RUNS.get("t") == 1)
            waiting, errors = [], []
            for first in range(0, 5000, 25):  # parked waiters until the store refuses starts
                results = await asyncio.gather(
                    *[engine.start(waiter, i, id=f"w-{i}") for i in range(first, first + 25)], return_exceptions=True
                )
                waiting += [r for r in results if not isinstance(r, BaseException)]
                errors += [r for r in results if isinstance(r, BaseException)]
                if errors:
                    break
            assert errors and all(isinstance(e, StorageFull) for e in errors)

            GATE["t"].set()  # its outcome's commit is refused: the store is full
            await asyncio.sleep(3.0)  # 30 heartbeats (each was a re-drive, and a re-run)
            assert RUNS["t"] == 1, f"the activity ran {RUNS['t']} times while nothing could commit"
            assert (await gated.describe())["status"] == "running"

            for h in waiting:  # terminating and purging frees room
                await engine.terminate(h.id)
                await engine.purge(h.id)
            assert await gated.result(timeout=10) == "t"
            assert RUNS["t"] == 1  # the drive took the outcome its refused commit carried
            assert engine.stats()["activity_outcomes_reused_total"] >= 1  # once per drive that took it: a drive while purges still run may be refused once more
            assert engine.state == "running"

    run(main())
