"""Signals (wait_signal and on_signal handlers) and queries in the pure driver."""

from __future__ import annotations

from typing import Any

import pytest
from wf_harness import FakeEngine, events_in_t_order, prefix_by_t

from weft_actors.codec import decode, encode, unpack_record
from weft_actors.errors import UnknownQuery
from weft_actors.workflow import HANDLER, Command, WorkflowRun, workflow


@workflow
async def summer(ctx, rounds: int) -> dict:
    """Sums "add" signals through a handler while it sleeps; snapshots the sum after each sleep."""
    state = {"sum": 0, "applied": []}

    def add(payload: int) -> None:
        state["sum"] += payload
        state["applied"].append([payload, ctx.is_replaying])

    ctx.on_signal("add", add)
    ctx.on_query("sum", lambda: state["sum"])
    ctx.on_query("scaled", lambda factor, offset=0: state["sum"] * factor + offset)
    snapshots = []
    for _ in range(rounds):
        await ctx.sleep(1)
        snapshots.append(state["sum"])
    return {"sum": state["sum"], "snapshots": snapshots, "applied": state["applied"]}


def test_wait_signal_returns_payloads_fifo_per_name_and_replays_them() -> None:
    @workflow
    async def collector(ctx) -> list:
        return [await ctx.wait_signal("a"), await ctx.wait_signal("b"), await ctx.wait_signal("a")]

    live = FakeEngine(collector, inbox=[("a", 1), ("b", {"x": 2}), ("a", [3])])
    live.run_to_end()
    assert live.result() == [1, {"x": 2}, [3]]
    assert [(live.log[s]["kind"], live.log[s]["name"]) for s in range(3)] == [("signal", "a"), ("signal", "b"), ("signal", "a")]
    assert FakeEngine(collector, history=live.log).start() == [live.final]


def test_waiting_signal_names_the_pending_wait_only() -> None:
    @workflow
    async def waiter(ctx) -> Any:
        await ctx.sleep(1)
        return await ctx.wait_signal("go")

    run = WorkflowRun(waiter.__weft_workflow__, "w", "r", ())
    run.start()
    assert run.waiting_signal() is None  # sleeping
    run.record_outcome(0, ok=encode(None))
    assert run.deliver()[0].op.name == "go"
    assert run.waiting_signal() == "go"
    run.record_outcome(1, ok=encode("yes"), inbox=4)
    assert run.waiting_signal() is None  # recorded, even before delivery
    assert run.deliver() == [Command("complete", payload=encode("yes"))]
    assert run.history[1]["inbox"] == 4


def test_record_handler_takes_the_next_seq_and_applies_at_the_next_deliver() -> None:
    run = WorkflowRun(summer.__weft_workflow__, "w", "r", (1,))
    [cmd] = run.start()
    assert (cmd.seq, cmd.op.kind) == (0, "sleep")
    seq, packed = run.record_handler("add", encode(5), 17)
    assert seq == 1
    assert unpack_record(packed) == {"kind": HANDLER, "name": "add", "t": 1, "ok": encode(5), "inbox": 17}
    assert run.query("sum", ()) == 0  # recorded, not yet delivered
    assert run.deliver() == []  # applied; the sleep command was already handed out
    assert run.query("sum", ()) == 5
    run.record_outcome(0, ok=encode(None))
    [done] = run.deliver()
    assert decode(done.payload) == {"sum": 5, "snapshots": [5], "applied": [[5, False]]}
    assert run.history[0]["t"] == 2


def test_handler_applications_replay_at_the_same_point_relative_to_other_ops() -> None:
    # arrivals are keyed by the seq of the op pending when they arrive; handlers take seqs too
    arrivals = {0: [("add", 1), ("add", 2)], 3: [("add", 10)], 5: [("add", 100)]}
    live = FakeEngine(summer, 3, arrivals=arrivals)
    live.run_to_end()
    result = live.result()
    assert result["snapshots"] == [3, 13, 113]
    assert result["applied"] == [[1, False], [2, False], [10, False], [100, False]]

    # Handler records sit between op outcomes in delivery order and take seqs of their own.
    order = [(rec["kind"], seq) for _, seq, rec in events_in_t_order(live.log)]
    assert order == [("handler", 1), ("handler", 2), ("sleep", 0), ("handler", 4), ("sleep", 3), ("handler", 6), ("sleep", 5)]

    replay = FakeEngine(summer, 3, history=live.log)
    [cmd] = replay.start()
    assert cmd.kind == "complete"
    replayed = decode(cmd.payload)
    assert replayed["sum"] == result["sum"] and replayed["snapshots"] == result["snapshots"]
    assert replayed["applied"] == [[1, True], [2, True], [10, True], [100, True]]


@pytest.mark.parametrize(
    ("handler_seq", "handler_t", "sleep_ts", "snapshots"),
    [
        (1, 1, (2, 3), [5, 5]),  # applied while waiting on the first sleep
        (2, 2, (1, 3), [0, 5]),  # applied while waiting on the second sleep
    ],
)
def test_the_delivery_ordinal_decides_where_a_recorded_handler_applies(
    handler_seq: int, handler_t: int, sleep_ts: tuple[int, int], snapshots: list[int]
) -> None:
    first, second = sleep_ts
    second_seq = 1 if handler_seq == 2 else 2
    history = {
        0: {"kind": "sleep", "name": "", "t": first, "ok": encode(None)},
        second_seq: {"kind": "sleep", "name": "", "t": second, "ok": encode(None)},
        handler_seq: {"kind": HANDLER, "name": "add", "t": handler_t, "ok": encode(5), "inbox": 1},
    }
    [cmd] = WorkflowRun(summer.__weft_workflow__, "w", "r", (2,), history).start()
    assert cmd.kind == "complete", cmd
    assert decode(cmd.payload)["snapshots"] == snapshots


def test_replay_of_a_log_cut_between_a_handler_and_the_op_outcome_then_live_matches() -> None:
    arrivals = {0: [("add", 1), ("add", 2)], 3: [("add", 100)]}
    live = FakeEngine(summer, 2, arrivals=arrivals)
    live.run_to_end()
    expected = live.result()
    for last_t in range(len(events_in_t_order(live.log)) + 1):
        prefix = prefix_by_t(live.log, last_t)
        # Signals whose handler application was committed are consumed; the rest are still in
        # the inbox and reach the op that is pending again after the replay.
        handled = sum(1 for rec in prefix.values() if rec["kind"] == HANDLER)
        unconsumed = [(seq, m) for seq in sorted(arrivals) for m in arrivals[seq]][handled:]
        pending: dict[int, list] = {}
        for seq, message in unconsumed:
            pending.setdefault(seq, []).append(message)
        resumed = FakeEngine(summer, 2, history=prefix, arrivals=pending)
        assert resumed.run_to_end().kind == "complete", last_t
        got = resumed.result()
        assert (got["sum"], got["snapshots"]) == (expected["sum"], expected["snapshots"]), last_t
        assert [p for p, _ in got["applied"]] == [1, 2, 100]
        assert [r for _, r in got["applied"]] == [i < handled for i in range(3)], last_t
        assert resumed.log == live.log, last_t


def test_query_reads_live_state_with_arguments() -> None:
    engine = FakeEngine(summer, 1)
    [cmd] = engine.start()
    run = engine.run
    assert run.query("sum", ()) == 0
    run.record_handler("add", encode(4), 1)
    run.deliver()
    assert run.query("sum", ()) == 4
    assert run.query("scaled", (10,)) == 40
    assert run.query("scaled", (10, 2)) == 42
    with pytest.raises(UnknownQuery):
        run.query("total", ())


def test_query_after_replay_sees_the_replayed_state() -> None:
    live = FakeEngine(summer, 2, arrivals={0: [("add", 7)], 2: [("add", 8)]})
    live.run_to_end()
    replay = FakeEngine(summer, 2, history=live.log)
    replay.start()
    assert replay.run.query("sum", ()) == 15


def test_a_pending_wait_signal_takes_precedence_over_a_handler_of_the_same_name() -> None:
    @workflow
    async def both(ctx) -> dict:
        handled: list = []
        ctx.on_signal("msg", handled.append)
        waited = await ctx.wait_signal("msg")
        await ctx.sleep(1)
        return {"waited": waited, "handled": handled}

    live = FakeEngine(both, inbox=[("msg", "first"), ("msg", "second")])
    live.run_to_end()
    assert live.result() == {"waited": "first", "handled": ["second"]}
    assert FakeEngine(both, history=live.log).start() == [live.final]


def test_a_failing_handler_fails_the_run_at_its_await_point() -> None:
    @workflow
    async def strict(ctx) -> None:
        def check(payload: int) -> None:
            if payload < 0:
                raise ValueError(f"negative: {payload}")

        ctx.on_signal("n", check)
        await ctx.sleep(1)
        await ctx.sleep(1)

    live = FakeEngine(strict, arrivals={0: [("n", 1)], 2: [("n", -2)]})
    cmd = live.run_to_end()
    assert cmd.kind == "fail" and cmd.error["type"] == "ValueError" and cmd.error["message"] == "negative: -2"
    assert [rec["kind"] for _, _, rec in events_in_t_order(live.log)] == ["handler", "sleep", "handler"]
    # Replay of the failed run's log fails the same way at the same point.
    [again] = FakeEngine(strict, history=live.log).start()
    assert (again.kind, again.error["type"], again.error["message"]) == ("fail", "ValueError", "negative: -2")
