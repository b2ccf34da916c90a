"""An activity whose outcome could not be committed is not executed again for that: the next
drive in the same process takes the outcome its refused commit carried (``shard/_reuse``).

The store here keeps flipping between refusing a step and taking the next one: each refusal
goes through the real LMDB transaction of the real store (the intent's applier refuses it, as
a store within its reserve refuses growth, or a failed write does), and room is back at once
for the drive after it. Every attempt must run exactly once, retries included, and the run
ends with the outcomes its refused commits carried."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.codec._records import unpack_record
from weft_actors.errors import ActivityError, StorageError, StorageFull
from weft_actors.shard import _commit_retry, _reuse
from weft_actors.store import StepCommit, _dispatch

RUNS: collections.Counter[tuple[str, Any]] = collections.Counter()


@activity
async def step(tag: str) -> str:
    RUNS[("step", tag, activity.info().attempt)] += 1
    return tag.upper()


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=0.01))
async def flaky(tag: str) -> int:
    attempt = activity.info().attempt
    RUNS[("flaky", tag, attempt)] += 1
    if attempt < 3:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


@activity(retry=RetryPolicy(max_attempts=3, non_retryable=(ValueError,)))
async def broken(tag: str) -> None:
    RUNS[("broken", tag, activity.info().attempt)] += 1
    raise ValueError("never works")


@workflow
async def flapping(ctx: Any) -> list[Any]:
    a = await ctx.run(step, "a")  # the only op awaited: its commit is the one the run goes ahead of
    b, c = await ctx.all([ctx.run(step, "b"), ctx.run(step, "c")])  # c's outcome waits in the wakes
    d = await ctx.run(flaky, "d")  # two retries decided, each refused once
    try:
        await ctx.run(broken, "e")  # given up at once; refused twice in a row
        e = "no error"
    except ActivityError as exc:
        e = exc.type  # type: ignore[attr-defined]
    return [a, b, c, d, e]


REFUSE = {"step": 1, "flaky": 1, "broken": 2}
"""How many times in a row each activity record's first commit is refused."""


class _Refuser:
    """Wraps the store's ``StepCommit`` applier: refuses the commits of the workflows ``wids``
    that carry an activity record, ``REFUSE[name]`` times each, with ``error``."""

    def __init__(self, wids: set[str], error: type[Exception]) -> None:
        self.wids = wids
        self.error = error
        self.seen: collections.Counter[tuple[str, int, int, bool]] = collections.Counter()
        self.refused = 0
        self.original = _dispatch.APPLIER_OF[StepCommit]

    def __enter__(self) -> _Refuser:
        _dispatch.APPLIER_OF[StepCommit] = self.apply
        return self

    def __exit__(self, *exc: object) -> None:
        _dispatch.APPLIER_OF[StepCommit] = self.original

    def apply(self, state: Any, intent: StepCommit) -> Any:
        if intent.wid in self.wids:
            for seq, packed in intent.ops:
                record = unpack_record(packed)
                if record.get("kind") != "activity" or "attempts" not in record:
                    continue
                key = (intent.wid, seq, record["attempts"], "t" in record)
                if self.seen[key] < REFUSE[record["name"].rsplit(".", 1)[-1]]:
                    self.seen[key] += 1
                    self.refused += 1
                    raise self.error(f"refused for the test ({key})")
        return self.original(state, intent)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("error", [StorageFull, StorageError])
def test_an_attempt_whose_outcome_commit_is_refused_again_and_again_runs_once(tmp_path, monkeypatch, error):
    monkeypatch.setattr(_commit_retry, "MAX_BACKOFF", 0.2)  # many refusals in a row, a short test

    async def main() -> None:
        RUNS.clear()
        async with Engine(str(tmp_path), app=[flapping], heartbeat=0.05, ttl=1.0) as engine:
            with _Refuser({"w"}, error) as refuser:
                handle = await engine.start(flapping, id="w")
                result = await handle.result(timeout=30)
            assert result == ["A", "B", "C", 3, "ValueError"]
            assert refuser.refused == 1 + 1 + 1 + 3 + 2, refuser.seen
            # Each attempt ran once; flaky ran exactly as often as its policy allows.
            assert max(RUNS.values()) == 1, dict(RUNS)
            assert sum(n for (name, _, _), n in RUNS.items() if name == "flaky") == 3
            assert sum(n for (name, _, _), n in RUNS.items() if name == "broken") == 1
            stats = engine.stats()
            assert stats["activity_outcomes_reused_total"] >= refuser.refused
            assert stats["activity_outcomes_dropped_total"] == 0
            assert not engine.refused.kept  # nothing left behind once the workflow ended
            assert engine.state == "running"

    run(main())


@activity
async def once(tag: str) -> str:
    RUNS[("once", tag, activity.info().attempt)] += 1
    return tag


@workflow
async def single(ctx: Any, tag: str) -> str:
    return await ctx.run(once, tag)


@pytest.mark.timeout(60)
def test_past_the_bound_the_oldest_kept_outcome_is_dropped_and_its_attempt_runs_again(tmp_path, monkeypatch):
    """The documented limit: kept outcomes are bounded (here to one), and one dropped past the
    bound is run again, as after a restart: at-least-once."""
    monkeypatch.setattr(_reuse, "MAX_KEPT", 1)
    monkeypatch.setitem(REFUSE, "once", 1)

    async def main() -> None:
        RUNS.clear()
        # heartbeat 0.5: x is driven again 0.5 s after its refusal, after y's refusal drops it.
        async with Engine(str(tmp_path), app=[single], heartbeat=0.5, ttl=2.0) as engine:
            with _Refuser({"x", "y"}, StorageError) as refuser:
                x = await engine.start(single, "x", id="x")
                await eventually(lambda: refuser.refused == 1)
                y = await engine.start(single, "y", id="y")
                await eventually(lambda: refuser.refused == 2)
                assert engine.stats()["activity_outcomes_dropped_total"] == 1
                assert [await x.result(timeout=20), await y.result(timeout=20)] == ["x", "y"]
            assert RUNS[("once", "x", 1)] == 2  # dropped: run again
            assert RUNS[("once", "y", 1)] == 1  # kept: taken
            assert engine.stats()["activity_outcomes_reused_total"] == 1

    run(main())
