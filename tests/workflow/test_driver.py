"""Record and replay in the pure driver: live run -> op log -> replay from the log."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from wf_harness import FakeEngine, fixed_now, fixed_random, fixed_uuid, prefix_by_seq, prefix_by_t

from weft_actors.codec import decode, encode, unpack_record
from weft_actors.workflow import ActivityOp, Command, SleepOp, WorkflowRun, activity, workflow

CALLS: list[str] = []


@activity
def reserve(order_id: str) -> str:
    CALLS.append("reserve")
    return f"r-{order_id}"


@activity
async def charge(order_id: str, cents: int) -> dict:
    CALLS.append("charge")
    return {"order": order_id, "cents": cents}


@activity
def ship(order_id: str) -> str:
    CALLS.append("ship")
    return f"s-{order_id}"


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


def make_three_steps() -> tuple[Any, list[tuple[str, bool]]]:
    """A three-activity workflow that notes ``ctx.is_replaying`` at each point it reaches."""
    seen: list[tuple[str, bool]] = []

    @workflow
    async def three_steps(ctx, order_id: str, cents: int) -> dict:
        seen.append(("begin", ctx.is_replaying))
        r = await ctx.run(reserve, order_id)
        seen.append(("after reserve", ctx.is_replaying))
        c = await ctx.run(charge, order_id, cents)
        seen.append(("after charge", ctx.is_replaying))
        s = await ctx.run(ship, order_id)
        seen.append(("after ship", ctx.is_replaying))
        return {"reserve": r, "charge": c, "ship": s}

    return three_steps, seen


EXPECTED_RESULT = {"reserve": "r-o-1", "charge": {"order": "o-1", "cents": 1299}, "ship": "s-o-1"}


def test_live_run_issues_one_op_command_per_step_in_seq_order_and_completes() -> None:
    wf, _ = make_three_steps()
    engine = FakeEngine(wf, "o-1", 1299)
    final = engine.run_to_end()
    assert final is not None and final.kind == "complete"
    assert engine.result() == EXPECTED_RESULT
    ops = [(c.seq, c.op.kind, c.op.name) for c in engine.commands if c.kind == "op"]
    assert ops == [(0, "activity", "reserve"), (1, "activity", "charge"), (2, "activity", "ship")]
    assert all(isinstance(c.op, ActivityOp) for c in engine.commands if c.kind == "op")
    assert CALLS == ["reserve", "charge", "ship"]


def test_live_log_records_kind_name_delivery_ordinal_and_encoded_outcome() -> None:
    wf, _ = make_three_steps()
    engine = FakeEngine(wf, "o-1", 1299)
    engine.run_to_end()
    assert engine.log == {
        0: {"kind": "activity", "name": "reserve", "t": 1, "ok": encode("r-o-1"), "attempts": 1},
        1: {"kind": "activity", "name": "charge", "t": 2, "ok": encode({"order": "o-1", "cents": 1299}), "attempts": 1},
        2: {"kind": "activity", "name": "ship", "t": 3, "ok": encode("s-o-1"), "attempts": 1},
    }
    assert engine.run.history == engine.log


def test_record_outcome_returns_the_packed_record_it_keeps_in_history() -> None:
    @workflow
    async def one_sleep(ctx) -> int:
        await ctx.sleep(3)
        return 1

    run = WorkflowRun(one_sleep.__weft_workflow__, "w", "r", ())
    [cmd] = run.start()
    assert cmd.kind == "op" and cmd.seq == 0 and isinstance(cmd.op, SleepOp) and cmd.op.seconds == 3.0
    assert cmd.record is None
    packed = run.record_outcome(0, ok=encode(None))
    assert unpack_record(packed) == {"kind": "sleep", "name": "", "t": 1, "ok": encode(None)}
    assert run.history[0] == unpack_record(packed)
    assert run.deliver() == [Command("complete", payload=encode(1))]


def test_full_replay_returns_the_same_complete_command_without_calling_activities() -> None:
    wf, _ = make_three_steps()
    live = FakeEngine(wf, "o-1", 1299)
    live_final = live.run_to_end()
    CALLS.clear()

    replay = FakeEngine(wf, "o-1", 1299, history=live.log)
    assert replay.start() == [live_final]
    assert CALLS == []
    assert replay.activity_calls == []


def test_is_replaying_is_true_for_recorded_steps_and_false_live() -> None:
    wf, seen = make_three_steps()
    live = FakeEngine(wf, "o-1", 1299)
    live.run_to_end()
    assert seen == [("begin", False), ("after reserve", False), ("after charge", False), ("after ship", False)]

    seen.clear()
    replay = FakeEngine(wf, "o-1", 1299, history=live.log)
    replay.start()
    assert seen == [("begin", True), ("after reserve", True), ("after charge", True), ("after ship", True)]
    assert replay.run.replaying is False
    assert replay.run.ctx.is_replaying is False


def test_is_replaying_turns_false_at_the_first_unrecorded_op() -> None:
    wf, seen = make_three_steps()
    live = FakeEngine(wf, "o-1", 1299)
    live.run_to_end()

    seen.clear()
    replay = FakeEngine(wf, "o-1", 1299, history=prefix_by_seq(live.log, 1))
    replay.run_to_end()
    # "after reserve" runs as part of delivering the recorded reserve outcome; charge is live.
    assert seen == [("begin", True), ("after reserve", True), ("after charge", False), ("after ship", False)]


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_partial_replay_returns_recorded_outcomes_then_a_command_for_the_first_unrecorded_op(k: int) -> None:
    wf, _ = make_three_steps()
    live = FakeEngine(wf, "o-1", 1299)
    live.run_to_end()
    CALLS.clear()

    replay = FakeEngine(wf, "o-1", 1299, history=prefix_by_seq(live.log, k))
    commands = replay.start()
    assert CALLS == []
    if k == 3:
        assert commands == [live.final]
        return
    [cmd] = commands
    assert cmd.kind == "op" and cmd.seq == k
    assert (cmd.op.kind, cmd.op.name) == ("activity", ["reserve", "charge", "ship"][k])
    assert cmd.record is None

    final = replay.run_to_end()
    assert final == live.final
    assert CALLS == ["reserve", "charge", "ship"][k:]
    assert replay.log == live.log


def test_replay_decodes_the_recorded_outcome_not_a_fresh_one() -> None:
    """Recorded outcomes win: replay of a log with different recorded values returns those."""
    wf, _ = make_three_steps()
    history = {
        0: {"kind": "activity", "name": "reserve", "t": 1, "ok": encode("R")},
        1: {"kind": "activity", "name": "charge", "t": 2, "ok": encode("C")},
        2: {"kind": "activity", "name": "ship", "t": 3, "ok": encode("S")},
    }
    [cmd] = WorkflowRun(wf.__weft_workflow__, "w", "r", ("o-1", 1299), history).start()
    assert cmd.kind == "complete"
    assert decode(cmd.payload) == {"reserve": "R", "charge": "C", "ship": "S"}
    assert CALLS == []


def test_started_but_unfinished_sleep_record_is_handed_back_in_the_command() -> None:
    @workflow
    async def napper(ctx) -> str:
        await ctx.run(reserve, "x")
        await ctx.sleep(60)
        return "rested"

    started = {"kind": "sleep", "name": "", "fire_at": 123.0}
    history = {0: {"kind": "activity", "name": "reserve", "t": 1, "ok": encode("r-x")}, 1: dict(started)}
    engine = FakeEngine(napper, history=history)
    [cmd] = engine.start()
    assert (cmd.kind, cmd.seq, cmd.op.kind) == ("op", 1, "sleep")
    assert cmd.record == started
    assert CALLS == []
    # The engine resumes the timer from the record rather than starting a new one.
    assert engine.run_to_end() == Command("complete", payload=encode("rested"))
    assert engine.log[1]["fire_at"] == 123.0 and engine.log[1]["t"] == 2


def test_record_started_keeps_kind_and_name_and_the_started_fields() -> None:
    @workflow
    async def napper(ctx) -> None:
        await ctx.sleep(5)

    run = WorkflowRun(napper.__weft_workflow__, "w", "r", ())
    run.start()
    assert unpack_record(run.record_started(0, fire_at=99.5)) == {"kind": "sleep", "name": "", "fire_at": 99.5}
    assert run.history[0] == {"kind": "sleep", "name": "", "fire_at": 99.5}
    assert run.deliver() == []  # started is not finished: nothing to deliver, no new command


def test_value_ops_are_recorded_once_and_replayed_verbatim() -> None:
    @workflow
    async def values(ctx) -> list:
        return [await ctx.now(), await ctx.random(), await ctx.uuid4()]

    live = FakeEngine(values)
    live.run_to_end()
    assert live.result() == [fixed_now(0), fixed_random(1), fixed_uuid(2)]
    assert [(live.log[s]["kind"], live.log[s]["name"]) for s in range(3)] == [("now", ""), ("random", ""), ("uuid4", "")]
    [cmd] = FakeEngine(values, history=live.log).start()
    assert cmd == live.final


def test_deliver_with_nothing_new_returns_no_command_and_a_finished_run_repeats_its_outcome() -> None:
    wf, _ = make_three_steps()
    run = WorkflowRun(wf.__weft_workflow__, "w", "r", ("o-1", 1299))
    [cmd] = run.start()
    assert run.deliver() == []  # the op command is handed out once
    for seq, value in enumerate(["a", "b", "c"]):
        run.record_outcome(seq, ok=encode(value))
        commands = run.deliver()
    assert commands == [Command("complete", payload=encode({"reserve": "a", "charge": "b", "ship": "c"}))]
    assert run.deliver() == commands
    assert run.outcome == commands[0]


def test_workflow_identity_is_visible_on_ctx() -> None:
    @workflow(name="ident")
    async def ident(ctx) -> list:
        return [ctx.workflow_id, ctx.run_id, ctx.workflow_type, ctx.attempt]

    engine = FakeEngine(ident, workflow_id="order-7", run_id="run-9")
    engine.run_to_end()
    assert engine.result() == ["order-7", "run-9", "ident", 1]


def test_ctx_logger_is_silent_during_replay(caplog: pytest.LogCaptureFixture) -> None:
    @workflow
    async def chatty(ctx) -> None:
        ctx.logger.info("before")
        await ctx.sleep(1)
        ctx.logger.info("after")

    caplog.set_level(logging.INFO, logger="weft_actors.workflow.user")
    live = FakeEngine(chatty, workflow_id="talk-1")
    live.run_to_end()
    assert [r.getMessage() for r in caplog.records] == ["[talk-1] before", "[talk-1] after"]

    caplog.clear()
    FakeEngine(chatty, workflow_id="talk-1", history=live.log).run_to_end()
    assert caplog.records == []

    caplog.clear()
    FakeEngine(chatty, workflow_id="talk-1", history=prefix_by_t(live.log, 0)).run_to_end()
    assert [r.getMessage() for r in caplog.records] == ["[talk-1] before", "[talk-1] after"]


def test_a_workflow_can_await_helper_coroutines_that_issue_ctx_ops() -> None:
    async def two_steps(ctx, order_id: str) -> list:
        return [await ctx.run(reserve, order_id), await ctx.run(ship, order_id)]

    @workflow
    async def nested(ctx) -> list:
        return await two_steps(ctx, "n") + await two_steps(ctx, "m")

    live = FakeEngine(nested)
    live.run_to_end()
    assert live.result() == ["r-n", "s-n", "r-m", "s-m"]
    assert FakeEngine(nested, history=live.log).start() == [live.final]
