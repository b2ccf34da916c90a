"""``WaitDeadlines``, on a real event loop: the calls a shard serves inline run out of
``wait`` in order and on time with one loop timer per wait value, a call that ended never
runs out, and ended calls stuck behind a long one are swept, not kept for its whole wait."""

from __future__ import annotations

import asyncio

import pytest

from weft_actors.supervisor._wait_deadlines import COMPACT_SLACK, WaitDeadlines


class _Call:
    def __init__(self, name: str, log: list[tuple[str, float]], loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.log = log
        self.loop = loop
        self.deadline = 0.0

    def expired(self) -> None:
        self.log.append((self.name, self.loop.time() - self.deadline))


@pytest.mark.timeout(20)
def test_calls_run_out_in_order_on_time_with_one_timer_per_wait_and_an_ended_one_never():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        log: list[tuple[str, float]] = []
        deadlines = WaitDeadlines(loop)
        tokens = {}
        for name, wait in (("a", 0.2), ("b", 0.05), ("c", 0.2), ("d", 0.05), ("e", 0.2)):
            tokens[name] = deadlines.add(_Call(name, log, loop), wait)
            await asyncio.sleep(0.005)
        assert deadlines.timers() == 2 and len(deadlines) == 5
        deadlines.ended(tokens["c"])  # answered first: never runs out
        deadlines.ended(tokens["c"])  # twice is harmless
        deadline = loop.time() + 5
        while len(log) < 4 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert [name for name, _ in log] == ["b", "d", "a", "e"]
        assert all(0 <= late < 0.15 for _, late in log), log  # each at its own deadline
        assert len(deadlines) == 0 and deadlines.timers() == 0 and deadlines.backlog() == 0

    asyncio.run(main())


@pytest.mark.timeout(20)
def test_ended_calls_behind_a_long_one_are_swept_and_a_new_wait_after_idle_still_runs_out():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        log: list[tuple[str, float]] = []
        deadlines = WaitDeadlines(loop)
        deadlines.add(_Call("long", log, loop), 30.0)  # the head, waiting all along
        for round_ in range(10):
            tokens = [deadlines.add(_Call(f"{round_}-{i}", log, loop), 30.0) for i in range(1000)]
            for token in tokens:
                deadlines.ended(token)
            assert deadlines.backlog() <= 2 * len(deadlines) + COMPACT_SLACK + 1
        assert len(deadlines) == 1 and log == []
        short = deadlines.add(_Call("short", log, loop), 0.05)
        deadline = loop.time() + 5
        while not log and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert [name for name, _ in log] == ["short"]
        deadlines.ended(short)  # after it ran out: nothing happens
        assert len(deadlines) == 1

    asyncio.run(main())
