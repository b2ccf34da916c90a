"""The ceiling of this design on this machine: engine_throughput.py's workload with the least
Python a driver could have around the same store and the same group commit.

    python bench/engine_ceiling.py --workflows 20000

Each of N callers (a task each, as in engine_throughput.py) submits the same ``CreateWorkflow``
intent ``Engine.start`` does, through the engine's own committer, into its own store; once
that commits, a bare driver runs the three-step workflow: it sends each outcome into the
coroutine, runs the activity inline, records the outcome (the same packed op record) in a
``StepCommit`` fenced on the claim, and ends the run in the last outcome's commit, as the
engine does. What it leaves out is everything else the engine does: no actor, commands,
activity runner, retries or timeouts, no history kept for replay, no inbox, timers, queries
or handlers, no validation, metrics or result waiters. So no engine built on this store and
this commit path can beat its number here: it is what the engine's own features and
structure are measured against. (It reaches into the engine for its committer, as
``store_floor.py`` reaches into the store: diagnostic benches, not users of the API.)

Prints one JSON line: workflows, seconds, workflows_per_s, cpu_us_per_workflow, commits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvloop  # noqa: E402

from _harness import report, scratch_dir  # noqa: E402
from bench_app import three_steps  # noqa: E402
from weft_actors import Engine  # noqa: E402
from weft_actors.codec import decode, decode_args, encode, encode_args, pack_record  # noqa: E402
from weft_actors.errors import WeftError  # noqa: E402
from weft_actors.shard._validate import new_id  # noqa: E402
from weft_actors.store import CreateWorkflow, Finish, StepCommit  # noqa: E402

_new_tuple = tuple.__new__


class _Op:
    """An activity call, awaited by the workflow: yields itself, gets the outcome sent back."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Any, args: bytes) -> None:
        self.fn = fn
        self.args = args

    def __await__(self):  # type: ignore[no-untyped-def]
        return (yield self)


class _Context:
    __slots__ = ()

    def run(self, fn: Any, *args: Any) -> _Op:
        return _Op(fn, encode_args(args, "activity argument"))


_CONTEXT = _Context()


class _BareRun:
    """One workflow run, driven from commit callback to commit callback."""

    __slots__ = ("committer", "future", "wid", "run_id", "epoch", "coro", "seq", "next_value")

    def __init__(self, committer: Any, future: asyncio.Future[Any], wid: str, run_id: str, epoch: int, coro: Any) -> None:
        self.committer = committer
        self.future = future
        self.wid = wid
        self.run_id = run_id
        self.epoch = epoch
        self.coro = coro
        self.seq = 0
        self.next_value: Any = None

    def advance(self, value: Any) -> tuple[Any, bool]:
        """Send ``value`` in; run the activity of the next op inline: (its result, False), or
        (the workflow's result, True)."""
        try:
            op = self.coro.send(value)
        except StopIteration as stop:
            return stop.value, True
        attempt = op.fn(*decode_args(op.args))
        try:
            attempt.send(None)
        except StopIteration as stop:
            return stop.value, False
        raise RuntimeError("an activity of this bench suspended")

    def record(self, value: Any) -> None:
        """Commit ``value`` as the current op's outcome, having run ahead to the next op."""
        seq = self.seq
        self.seq = seq + 1
        payload = encode(value, "activity result")
        packed = pack_record({"kind": "activity", "name": "add_one", "t": seq + 1, "ok": payload, "attempts": 1})
        following, ended = self.advance(decode(payload))
        finish = Finish("completed", encode(following, "workflow result"), None) if ended else None
        self.next_value = following
        intent = _new_tuple(StepCommit, (self.wid, self.epoch, self.run_id, ((seq, packed),), (), (), (), finish, None, ()))
        self.committer.submit(intent, self.ended if ended else self.committed)

    def committed(self, result: Any) -> None:
        if result is not None:
            self.future.set_exception(RuntimeError(f"step commit failed: {result!r}"))
            return
        self.record(self.next_value)

    def ended(self, result: Any) -> None:
        if result is not None:
            self.future.set_exception(RuntimeError(f"final commit failed: {result!r}"))
            return
        self.future.set_result(self.next_value)


async def run(workflows: int, data_dir: str) -> dict:
    async with Engine(data_dir, app=[three_steps], tune_gc=True) as engine:
        committer = engine.committer
        loop = committer.loop

        async def execute(i: int) -> int:
            future = loop.create_future()
            wid = new_id()
            args = (i,)
            intent = _new_tuple(CreateWorkflow, (wid, "three_steps", encode_args(args), new_id(), "error", None, None, None, None, None, None))

            def created(result: Any) -> None:
                if isinstance(result, WeftError):
                    future.set_exception(result)
                    return
                bare = _BareRun(committer, future, wid, result.run_id, result.epoch, three_steps(_CONTEXT, *args))
                value, _ = bare.advance(None)  # three_steps awaits an activity first
                bare.record(value)

            committer.submit(intent, created)
            return await future

        started = time.perf_counter()
        cpu0 = time.process_time()
        results = await asyncio.gather(*(execute(i) for i in range(workflows)))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        assert results == [i + 3 for i in range(workflows)], "wrong results"
        commits = engine.stats()["commits_total"]
    return {
        "workflows": workflows,
        "seconds": round(seconds, 3),
        "workflows_per_s": round(workflows / seconds, 1),
        "cpu_us_per_workflow": round(cpu / workflows * 1e6, 1),
        "commits": commits,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=20_000)
    args = parser.parse_args()
    with scratch_dir(prefix="weft-ceiling-") as path:
        result = uvloop.run(run(args.workflows, path))
    report(result)


if __name__ == "__main__":
    main()
