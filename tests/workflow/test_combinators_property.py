"""Property: for any program of ``all``/``race`` (nested) over timers, signals and activities,
finished (or failed) in any order and interleaved with updates, signal handlers and a cancel
request, a replay of the log (or of any prefix of it) agrees with the live run: the same
ending, nothing re-executed, no non-determinism."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wf_harness import prefix_by_t
from wf_script import Script

from weft_actors.errors import ActivityError
from weft_actors.workflow import activity, workflow


@activity
def work(x: int) -> int:
    return x


def _leaf(ctx: Any, spec: list) -> Any:
    kind, arg = spec
    if kind == "sleep":
        return ctx.sleep(arg)
    if kind == "signal":
        return ctx.wait_signal(arg)
    if kind in ("race", "all"):  # nested
        ops = [_leaf(ctx, inner) for inner in arg]
        return ctx.race(ops) if kind == "race" else ctx.all(ops)
    return ctx.run(work, arg)


@workflow
async def program(ctx, steps: list) -> dict:
    state = {"total": 0}

    def bump(by: int) -> int:
        state["total"] += by
        return state["total"]

    ctx.on_update("bump", bump)
    ctx.on_signal("note", lambda by: bump(by))
    out: list[Any] = []
    for step in steps:
        try:
            if step[0] == "one":
                out.append(await _leaf(ctx, step[1]))
            elif step[0] == "cond":
                await ctx.wait_condition(lambda target=step[1]: state["total"] >= target)
                out.append(["cond", state["total"]])
            else:
                ops = [_leaf(ctx, spec) for spec in step[1]]
                out.append(await (ctx.race(ops) if step[0] == "race" else ctx.all(ops)))
        except (ActivityError, asyncio.CancelledError) as exc:  # the program goes on after either
            out.append(["error", type(exc).__name__])
    return {"out": out, "total": state["total"]}


simple_leaves = st.one_of(
    st.tuples(st.just("sleep"), st.integers(1, 5)),
    st.tuples(st.just("signal"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("act"), st.integers(0, 9)),
).map(list)
leaves = st.one_of(
    simple_leaves,
    st.tuples(st.sampled_from(["race", "all"]), st.lists(simple_leaves, min_size=1, max_size=3)).map(list),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("one"), leaves),
        st.tuples(st.sampled_from(["race", "all"]), st.lists(leaves, min_size=1, max_size=4)),
        st.tuples(st.just("cond"), st.integers(0, 3)),
    ).map(list),
    min_size=1,
    max_size=5,
)


FAILED = {"kind": "activity", "type": "ValueError", "message": "no", "activity": "work", "attempts": 1}


def _drive(script: Script, data: st.DataObject) -> None:
    for _ in range(200):
        if script.final is not None:
            return
        action = data.draw(st.sampled_from(["finish", "finish", "finish", "update", "note", "cancel"]), label="action")
        if action == "update":
            script.update("bump", 1)
            continue
        if action == "note":
            assert script.signal("note", 1)
            continue
        if action == "cancel":
            if not script.run.cancel_requested and script.run.pending_seqs():  # as the shard does
                script.cancel()
            continue
        pending = script.ops()
        if not pending:
            script.update("bump", 1)  # only a condition is waited for
            continue
        seq, kind, name = data.draw(st.sampled_from(pending), label="finish")
        if kind == "signal":
            assert script.signal(name, f"{name}@{seq}")
        elif kind == "activity":
            if data.draw(st.booleans(), label="fails"):
                script.finish(seq, error=FAILED)
            else:
                script.finish(seq, seq * 100)
        else:
            script.finish(seq)
    raise AssertionError("the program did not finish")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.data())
def test_any_completion_order_replays_to_the_same_ending(program_steps: list, data: st.DataObject) -> None:
    live = Script(program, program_steps)
    _drive(live, data)
    assert live.final.kind == "complete", live.final

    replay = live.replay()
    assert replay.final == live.final
    assert replay.commands == [live.final]  # nothing started, cancelled or resolved again

    last_t = max(record["t"] for record in live.log.values() if "t" in record)
    for t in range(0, last_t + 1):
        partial = Script(program, program_steps, history=prefix_by_t(live.log, t))
        assert partial.final is None or partial.final.kind != "stuck", (t, partial.final)
        for seq, _, _ in partial.ops():
            assert "t" not in partial.log.get(seq, {})  # only unrecorded ops run again
