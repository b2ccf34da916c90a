"""ActivityRunner's contract: an attempt that ends inline is handed back as ``Finished`` and
takes no slot, no Task and no callback; any other reports through ``done`` once, later."""

from __future__ import annotations

import asyncio
import threading
import types

import pytest

from weft_actors.codec import encode_args
from weft_actors.shard._activities import ActivityRunner, Finished
from weft_actors.workflow import ActivityInfo, activity, activity_definition

pytestmark = pytest.mark.timeout(10)


@activity
async def add_one(x: int) -> int:
    return x + 1


@activity
async def refuse(x: int) -> int:
    raise ValueError(f"no {x}")


@activity
async def sleepy(x: int) -> int:
    await asyncio.sleep(0.01)
    return x * 2


def _info(seq: int = 0) -> ActivityInfo:
    return ActivityInfo(f"w/r/{seq}", "w", "r", seq, 1, "t")


def _start(runner: ActivityRunner, fn, *args, outcomes: list, seq: int = 0):
    return runner.run(activity_definition(fn), encode_args(args), _info(seq), None, lambda value, error: outcomes.append((value, error)))


def _with_runner(body, max_inflight: int = 1000) -> None:
    async def main() -> None:
        runner = ActivityRunner(asyncio.get_running_loop(), max_threads=2, max_inflight=max_inflight)
        try:
            await body(runner)
        finally:
            runner.close()

    asyncio.run(main())


def test_an_attempt_that_never_suspends_is_handed_back_finished():
    async def body(runner: ActivityRunner) -> None:
        outcomes: list = []
        assert _start(runner, add_one, 41, outcomes=outcomes) == Finished(42, None)
        failed = _start(runner, refuse, 7, outcomes=outcomes)
        assert isinstance(failed, Finished) and isinstance(failed.error, ValueError) and str(failed.error) == "no 7"
        await asyncio.sleep(0)
        assert outcomes == []  # done is never called for an attempt handed back finished
        assert runner.inflight == 0 and not runner.tasks and runner.started == 2

    _with_runner(body)


def test_undecodable_arguments_end_the_attempt_inline():
    async def body(runner: ActivityRunner) -> None:
        outcomes: list = []
        started = runner.run(activity_definition(add_one), b"\xc1 not msgpack", _info(), None, lambda *outcome: outcomes.append(outcome))
        assert isinstance(started, Finished) and started.value is None and started.error is not None
        assert outcomes == [] and runner.inflight == 0

    _with_runner(body)


def test_an_attempt_that_suspends_reports_through_done_once_later():
    async def body(runner: ActivityRunner) -> None:
        outcomes: list = []
        cancel = _start(runner, sleepy, 5, outcomes=outcomes)
        assert callable(cancel) and not isinstance(cancel, Finished)
        assert outcomes == [] and runner.inflight == 1 and len(runner.tasks) == 1
        for _ in range(200):
            if outcomes:
                break
            await asyncio.sleep(0.005)
        assert outcomes == [(10, None)]
        assert runner.inflight == 0 and not runner.tasks

    _with_runner(body)


def test_a_queued_attempt_that_ends_inline_on_its_turn_reports_through_done():
    async def body(runner: ActivityRunner) -> None:
        first: list = []
        queued: list = []
        _start(runner, sleepy, 1, outcomes=first, seq=0)
        assert runner.inflight == 1
        stop = _start(runner, add_one, 1, outcomes=queued, seq=1)
        assert callable(stop) and runner.queued == 1 and queued == []
        for _ in range(200):
            if queued:
                break
            await asyncio.sleep(0.005)
        assert first == [(2, None)] and queued == [(2, None)]
        assert runner.inflight == 0 and runner.queued == 0

    _with_runner(body, max_inflight=1)


RAN: list[str] = []
GATE = threading.Event()


@activity
def hold_thread() -> None:
    GATE.wait(5)


@activity
def recorded(tag: str) -> str:
    RAN.append(tag)
    return tag


def test_a_thread_attempt_that_times_out_while_queued_for_a_thread_never_runs():
    """Both pool threads are busy, so each attempt waits in the pool's queue; its
    ``start_to_close`` passes there. A timed-out call is withdrawn before it starts: neither the
    first attempt nor the retries (each another queued copy) run once the threads are free."""

    async def body(runner: ActivityRunner) -> None:
        RAN.clear()
        GATE.clear()
        holders: list = []
        for seq in range(2):
            _start(runner, hold_thread, outcomes=holders, seq=seq)
        outcomes: list = []
        for attempt in range(3):  # the retries of one op: each times out queued
            runner.run(activity_definition(recorded), encode_args((f"attempt {attempt}",)), _info(9), 0.05, lambda value, error: outcomes.append((value, error)))
            for _ in range(200):
                if len(outcomes) > attempt:
                    break
                await asyncio.sleep(0.005)
            assert isinstance(outcomes[attempt][1], TimeoutError)
        GATE.set()
        late: list = []
        _start(runner, recorded, "after", outcomes=late, seq=10)
        # Every call still queued in the pool runs (or is withdrawn) before shutdown returns.
        await asyncio.wait_for(asyncio.to_thread(runner._pool.shutdown, True), 5)
        assert RAN == ["after"]

    _with_runner(body)


def test_closing_a_suspended_attempt_closes_the_activity_and_lets_generator_exit_through():
    """A suspended attempt's Task that is collected unfinished (its loop gone) is closed: the
    activity's coroutine is closed too, and ``GeneratorExit`` is not thrown into it as a
    failure, not even when the collector closed the activity's coroutine first (that used to
    raise "cannot reuse already awaited coroutine", printed as "Exception ignored")."""
    from weft_actors.shard._activities import _finish

    closed: list[str] = []

    @types.coroutine
    def suspend():  # type: ignore[no-untyped-def]
        yield "parked"

    async def parks(tag: str) -> None:
        try:
            await suspend()
        finally:
            closed.append(tag)

    for inner_first in (False, True):
        coro = parks(f"inner_first={inner_first}")
        first = coro.send(None)
        outer = _finish(coro, first, _info())
        assert outer.send(None) is first
        if inner_first:
            coro.close()
        outer.close()  # raised RuntimeError when the inner coroutine was closed first
        assert closed[-1] == f"inner_first={inner_first}"
