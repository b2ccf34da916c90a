"""``describe()`` and ``list()`` as a person reads them: ISO 8601 times beside the raw ones, the
input, the owner's process, the durable timers, and each op's start, end and duration from
the wall-clock stamps the engine writes on op records (which replay ignores). On a fake clock,
so every time is exact."""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(60)

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
GATES: dict[str, asyncio.Event] = {}
FAILURES: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    """Each test (each backend's run of it) starts with no attempts counted and no gates."""
    FAILURES.clear()
    GATES.clear()


@activity
async def gated(key: str) -> str:
    await GATES[key].wait()
    return key


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=10.0, backoff=1.0))
async def fails_once(key: str) -> str:
    FAILURES[key] = FAILURES.get(key, 0) + 1
    if FAILURES[key] == 1:
        raise ConnectionError("first attempt fails")
    return "second worked"


@workflow
async def timeline(ctx, key: str, extra: dict) -> list:
    seen = []
    ctx.on_signal("note", seen.append)
    first = await ctx.run(gated, key)  # op 0: an activity that suspends
    await ctx.sleep(5)  # op 1: a timer
    second = await ctx.run(fails_once, key)  # op 2: a retry in between
    third = await ctx.wait_signal("go")  # op 3: a wait that records nothing when it begins
    return [first, second, third, seen, extra]


@workflow
async def racing(ctx) -> int:
    index, _ = await ctx.race([ctx.wait_signal("a"), ctx.sleep(60)])
    return index


@workflow
async def chained(ctx, n: int) -> int:
    if n > 0:
        return ctx.continue_as_new(n - 1)
    await ctx.sleep(1)
    return n


def _engine(path: Any, clock: FakeClock, app: list[Any]) -> Engine:
    """One engine alone on its store (no leases to renew while the fake clock jumps ahead)."""
    return Engine(str(path), app=app, clock=clock, background=False, ownership="single", probe_peers=False)


async def _history(engine: Engine, wid: str, count: int) -> list[dict[str, Any]]:
    """The history once ``count`` ops have ended."""
    async def ended() -> list[dict[str, Any]] | None:
        history = (await engine.get_handle(wid).describe())["history"]
        return history if sum(op["outcome"] != "pending" for op in history) >= count else None

    deadline = asyncio.get_running_loop().time() + 10
    while (history := await ended()) is None:
        assert asyncio.get_running_loop().time() < deadline, f"{wid}: {count} ops did not end in time"
        await asyncio.sleep(0.01)
    return history


async def _described_once(handle: Any, done: Any) -> dict[str, Any]:
    """``describe()`` once ``done(described)`` holds (a commit may land a few loop turns after
    the op that caused it, on a store that commits off the loop)."""
    deadline = asyncio.get_running_loop().time() + 10
    while not done(described := await handle.describe()):
        assert asyncio.get_running_loop().time() < deadline, f"never: {described['timers']}"
        await asyncio.sleep(0.01)
    return described


def _times(op: dict[str, Any]) -> tuple[Any, Any, Any]:
    return op["started"], op["ended"], op["duration"]


def test_op_times_are_the_stamps_of_their_start_and_outcome_and_replay_ignores_them(tmp_path):
    async def main():
        clock = FakeClock()
        t0 = clock.now()
        GATES["k"] = asyncio.Event()
        engine = _engine(tmp_path, clock, [timeline])
        await engine.open()
        handle = await engine.start(timeline, "k", {"n": 1}, id="tl", execution_timeout=3600)
        await eventually(lambda: engine.activities.inflight == 1)  # op 0's attempt runs (since t0)
        clock.advance(2)
        GATES["k"].set()
        history = await _history(engine, "tl", 1)
        assert _times(history[0]) == (t0, t0 + 2, 2.0) and history[0]["attempts"] == 1
        # op 1 is a timer armed at t0 + 2: pending, with its fire time among the timers. The
        # run went ahead of op 0's commit, so op 1's start is the next commit (on PostgreSQL,
        # off the loop: under load it lands a few turns after op 0's outcome is readable).
        described = await _described_once(handle, lambda d: len(d["history"]) > 1)
        assert described["history"][1]["outcome"] == "pending" and _times(described["history"][1]) == (t0 + 2, None, None)
        assert [(t["kind"], t["seq"], t["fire_at"]) for t in described["timers"]] == [("sleep", 1, t0 + 7), ("deadline", None, t0 + 3600)]
        assert all(ISO.match(t["fire_at_iso"]) for t in described["timers"])
        clock.advance(5)
        engine.tick()
        await _history(engine, "tl", 2)
        # op 2 fails once at t0 + 7 and retries 10 s later: one op, started by its first attempt.
        described = await _described_once(handle, lambda d: any(t["kind"] == "retry" for t in d["timers"]))
        assert [(t["kind"], t["seq"], t["fire_at"]) for t in described["timers"]][0] == ("retry", 2, t0 + 17)
        clock.advance(10)
        engine.tick()
        history = await _history(engine, "tl", 3)
        assert _times(history[1]) == (t0 + 2, t0 + 7, 5.0)
        assert _times(history[2]) == (t0 + 7, t0 + 17, 10.0) and history[2]["attempts"] == 2
        clock.advance(1)
        await engine.signal("tl", "note", "applied at once")
        await _history(engine, "tl", 4)  # the handler's record
        # The run is parked on op 3, a wait_signal that records nothing when it begins. Another
        # engine replays it from the stamped records (no non-determinism) and finishes it.
        await engine.close()
        taker = _engine(tmp_path, clock, [timeline])
        await taker.open()
        clock.advance(2)
        await taker.signal("tl", "go", "third")
        assert await taker.get_handle("tl").result(timeout=5) == ["k", "second worked", "third", ["applied at once"], {"n": 1}]
        described = await taker.get_handle("tl").describe()
        assert described["nondeterminism"] is None
        history = described["history"]
        assert [_times(op) for op in history[:3]] == [(t0, t0 + 2, 2.0), (t0 + 2, t0 + 7, 5.0), (t0 + 7, t0 + 17, 10.0)]
        # Op 3 began waiting when op 2 ended; the handler, applied meanwhile, took seq 4.
        assert (history[3]["seq"], history[3]["kind"], history[3]["name"]) == (3, "signal", "go")
        assert _times(history[3]) == (t0 + 17, t0 + 20, 3.0)
        assert (history[4]["seq"], history[4]["kind"]) == (4, "handler") and _times(history[4]) == (t0 + 18, t0 + 18, 0.0)
        for op in history:
            assert ISO.match(op["started_iso"]) and ISO.match(op["ended_iso"])
        assert described["timers"] == []
        await taker.close()

    run(main())


def test_describe_has_input_owner_process_iso_times_and_timers(tmp_path):
    async def main():
        clock = FakeClock(start=1_796_139_000.25)
        async with _engine(tmp_path, clock, [timeline, chained]) as engine:
            GATES["d"] = asyncio.Event()
            await engine.start(timeline, "d", {"tags": ["a", "b"]}, id="d-1")
            described = await engine.get_handle("d-1").describe()
            assert described["input"] == ["d", {"tags": ["a", "b"]}]
            assert described["owner"] == engine.engine_id
            assert described["owner_shard"] == {"slot": None, "pid": os.getpid(), "state": "live"}
            assert (described["created"], described["created_iso"]) == (1_796_139_000.25, "2026-12-01T15:30:00.250Z")
            assert described["updated_iso"] == "2026-12-01T15:30:00.250Z"
            assert (described["ended"], described["ended_iso"]) == (None, None)
            # Keys in the order a person reads them: each time with its ISO twin beside it.
            keys = list(described)
            assert keys[keys.index("created") + 1] == "created_iso" and keys[keys.index("ended") + 1] == "ended_iso"
            GATES["d"].set()

            delayed = await engine.start(chained, 0, id="later", start_delay=30)
            pending = await delayed.describe()
            assert pending["status"] == "pending" and [(t["kind"], t["seq"], t["fire_at"]) for t in pending["timers"]] == [("start", None, clock.now() + 30)]

            await engine.start(chained, 2, id="chain")
            # The last run's sleep starts in its first turn, after the commit that began the
            # run: the clock moves only once that sleep is recorded (moved before, the sleep
            # started a second later and the tick below found it not yet due).
            chain_handle = engine.get_handle("chain")
            await _described_once(chain_handle, lambda d: len(d.get("previous_runs") or ()) == 2 and any(t["kind"] == "sleep" for t in d["timers"]))
            clock.advance(1)
            engine.tick()
            assert await engine.get_handle("chain").result(timeout=5) == 0
            chain = await engine.get_handle("chain").describe()
            assert chain["input"] == [0]  # the arguments this run continued with
            assert [run["status"] for run in chain["previous_runs"]] == ["continued", "continued"]
            assert all(ISO.match(run["ended_iso"]) for run in chain["previous_runs"])
            assert chain["ended"] == chain["updated"] == clock.now() and ISO.match(chain["ended_iso"])
            assert chain["owner"] is None and chain["owner_shard"] is None
            # The sleep of the last run started when that run began (the previous one ended).
            assert _times(chain["history"][0]) == (chain["previous_runs"][-1]["ended"], clock.now(), 1.0)

            page = await engine.list(type="chained")
            assert [(item["id"], item["status"]) for item in page["items"]] == [("chain", "completed"), ("later", "pending")]
            assert all(ISO.match(item["updated_iso"]) for item in page["items"])

    run(main())


def test_a_wait_inside_a_race_has_no_start_of_its_own(tmp_path):
    """Its siblings may end before it starts, so no earlier end says when it began: left
    unknown rather than guessed. Its timed sibling recorded its start."""

    async def main():
        clock = FakeClock()
        async with _engine(tmp_path, clock, [racing]) as engine:
            handle = await engine.start(racing, id="r")
            await eventually(lambda: len(engine.timers) == 1)
            clock.advance(4)
            await engine.signal("r", "a", None)
            assert await handle.result(timeout=5) == 0
            signal, sleep = (await handle.describe())["history"]
            assert (signal["kind"], signal["outcome"]) == ("signal", "ok") and _times(signal) == (None, clock.now(), None)
            assert (sleep["kind"], sleep["outcome"]) == ("sleep", "lost_race") and "error" not in sleep and _times(sleep) == (clock.now() - 4, clock.now(), 4.0)

    run(main())
