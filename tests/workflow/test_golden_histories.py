"""Golden op logs: histories recorded by earlier code must replay to their recorded ending.

The files in ``histories/`` were written once by running this module as a script (see
``histories/README.md``). A driver or codec change that breaks them would strand every workflow
already running in a store, so the fix is in the change, never in regenerating the files.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from wf_harness import FakeEngine, fixed_random, fixed_uuid, from_json, history_from_json, to_json
from wf_script import Script

from weft_actors.codec import decode
from weft_actors.errors import ActivityError
from weft_actors.workflow import RetryPolicy, WorkflowRun, activity, workflow, workflow_definition

HISTORIES = Path(__file__).resolve().parent / "histories"
CALLS: list[str] = []

# -- reference workflows (their code must keep replaying the stored histories) -----------------


@activity
def g_reserve(order_id: str) -> str:
    CALLS.append("g_reserve")
    return f"reservation-{order_id}"


@activity
async def g_charge(order_id: str, cents: int) -> dict:
    CALLS.append("g_charge")
    return {"order": order_id, "cents": cents, "currency": "EUR"}


@activity
def g_ship(order_id: str) -> tuple:
    CALLS.append("g_ship")
    return ("parcel", order_id)


@workflow
async def golden_order(ctx, order_id: str, cents: int) -> dict:
    started = await ctx.now()
    reservation = await ctx.run(g_reserve, order_id)
    charge = await ctx.run(g_charge, order_id, cents)
    parcel = await ctx.run(g_ship, order_id)
    key = await ctx.uuid4()
    return {"started": started, "reservation": reservation, "charge": charge, "parcel": parcel, "key": key}


@workflow
async def golden_approval(ctx) -> dict:
    state: dict[str, Any] = {"sum": 0, "snapshots": []}

    def add(amount: int) -> None:
        state["sum"] += amount

    ctx.on_signal("add", add)
    ctx.on_query("sum", lambda: state["sum"])
    await ctx.sleep(10)
    state["snapshots"].append(state["sum"])
    try:
        late = await ctx.wait_signal("late", timeout=5)
    except TimeoutError:
        late = "timed out"
    approved = await ctx.wait_signal("approve")
    state["snapshots"].append(state["sum"])
    await ctx.sleep(5)
    return {"sum": state["sum"], "snapshots": state["snapshots"], "late": late, "approved": approved}


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=1.0, backoff=2.0))
def g_always_fails(n: int) -> None:
    CALLS.append("g_always_fails")
    raise ValueError(f"bad input {n}")


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=0.5))
def g_flaky(n: int) -> int:
    CALLS.append("g_flaky")
    if activity.info().attempt < 2:
        raise ConnectionError("try again")
    return n * 10


@workflow
async def golden_retry(ctx, n: int) -> dict:
    try:
        await ctx.run(g_always_fails, n)
        failure = None
    except ActivityError as exc:
        failure = [exc.type, exc.cause_message, exc.attempts]
    value = await ctx.run(g_flaky, n)
    return {"failure": failure, "value": value}


@workflow
async def golden_semantics(ctx, needed: int) -> dict:
    state = {"total": 0}

    def add(amount: int) -> int:
        state["total"] += amount
        return state["total"]

    ctx.on_update("add", add)
    index, value = await ctx.race([ctx.wait_signal("go"), ctx.sleep(30)])
    both = await ctx.all([ctx.run(g_reserve, "x"), ctx.random()])
    await ctx.wait_condition(lambda: state["total"] >= needed)
    patched = await ctx.patched("golden-change")
    try:
        await ctx.wait_signal("never")
        cleanup = None
    except asyncio.CancelledError:
        cleanup = await ctx.uuid4()
    return {"race": [index, value], "both": both, "total": state["total"], "patched": patched, "cleanup": cleanup}


REFERENCE = {workflow_definition(fn).name: fn for fn in (golden_order, golden_approval, golden_retry, golden_semantics)}


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


def golden_files() -> list[Path]:
    return sorted(HISTORIES.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# -- tests ------------------------------------------------------------------------------------


def test_there_are_golden_histories_for_every_reference_workflow() -> None:
    names = [load(p)["workflow"] for p in golden_files()]
    assert set(names) == set(REFERENCE)
    assert len(names) >= 4


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.stem)
def test_golden_history_replays_to_its_recorded_ending(path: Path) -> None:
    data = load(path)
    assert data["format"] == 1
    fn = REFERENCE[data["workflow"]]
    history = history_from_json(data["history"])
    run = WorkflowRun(workflow_definition(fn), data["workflow_id"], data["run_id"], tuple(data["args"]), history)
    [cmd] = run.start()
    expect = data["expect"]
    assert cmd.kind == expect["kind"], cmd.error
    if cmd.kind == "complete":
        expected_payload = from_json(expect["payload"])
        assert cmd.payload == expected_payload
        assert repr(decode(cmd.payload)) == expect["result_repr"]
    else:
        assert (cmd.seq, cmd.op.kind, cmd.op.name) == (expect["seq"], expect["op_kind"], expect["op_name"])
        assert cmd.record == from_json(expect["record"])
    assert CALLS == [], "replay must not run recorded activities"


@pytest.mark.parametrize("path", [p for p in golden_files() if load(p)["expect"]["kind"] == "op"], ids=lambda p: p.stem)
def test_an_unfinished_golden_history_resumes_to_a_result(path: Path) -> None:
    data = load(path)
    engine = FakeEngine(
        REFERENCE[data["workflow"]],
        *data["args"],
        history=history_from_json(data["history"]),
        inbox=[tuple(m) for m in data.get("resume_inbox", [])],
        workflow_id=data["workflow_id"],
        run_id=data["run_id"],
    )
    assert engine.run_to_end().kind == "complete"
    assert repr(engine.result()) == data["resume_result_repr"]


# -- writing the files (run once: python tests/workflow/test_golden_histories.py --write) ------


def _record(name: str, description: str, engine: FakeEngine, args: list, **extra: Any) -> dict[str, Any]:
    final = engine.final
    if final is not None:
        expect = {"kind": "complete", "payload": to_json(final.payload), "result_repr": repr(decode(final.payload))}
    else:
        cmd = engine.blocked_on
        expect = {"kind": "op", "seq": cmd.seq, "op_kind": cmd.op.kind, "op_name": cmd.op.name, "record": to_json(cmd.record)}
    return {
        "format": 1,
        "description": description,
        "workflow": name,
        "workflow_id": engine.workflow_id,
        "run_id": engine.run_id,
        "args": args,
        "history": to_json(engine.log),
        "expect": expect,
        **extra,
    }


def build_goldens() -> dict[str, dict[str, Any]]:
    goldens: dict[str, dict[str, Any]] = {}

    order = FakeEngine(golden_order, "o-1", 1299, workflow_id="golden-order-1")
    order.run_to_end()
    goldens["order_three_steps"] = _record(
        "golden_order", "now, three activities (sync, async, sync returning a tuple), uuid4", order, ["o-1", 1299])

    approval_arrivals = {0: [("add", 1), ("add", 2)], 4: [("add", 10)], 6: [("add", 100)]}
    approval = FakeEngine(golden_approval, inbox=[("approve", True)], arrivals=approval_arrivals,
                          workflow_id="golden-approval-1")
    approval.run_to_end()
    goldens["approval_signals_handlers_sleep"] = _record(
        "golden_approval", "signal handler applications interleaved with sleeps, a wait_signal timeout "
        "and a consumed signal", approval, [])

    waiting = FakeEngine(golden_approval, arrivals={0: [("add", 5)]}, workflow_id="golden-approval-2")
    assert waiting.run_to_end() is None  # blocked on "approve"
    goldens["approval_waiting_for_signal"] = _record(
        "golden_approval", "unfinished: parked on wait_signal('approve') after a handler and a timeout",
        waiting, [], resume_inbox=[["approve", "yes"]],
        resume_result_repr=repr({"sum": 5, "snapshots": [5, 5], "late": "timed out", "approved": "yes"}))

    retry = FakeEngine(golden_retry, 7, workflow_id="golden-retry-1")
    retry.run_to_end()
    goldens["retry_recorded_failures"] = _record(
        "golden_retry", "an activity that failed all 3 attempts (caught as ActivityError), then one that "
        "succeeded on its 2nd attempt", retry, [7])

    # The same run as it stood between g_flaky's failed first attempt and its retry.
    pending = FakeEngine(golden_retry, 7, workflow_id="golden-retry-2")
    pending.run_to_end()
    finished = pending.log[1]
    pending.log[1] = {k: v for k, v in finished.items() if k not in ("t", "ok", "err")} | {"attempts": 1}
    pending.final, pending.blocked_on = None, pending.commands[-2]._replace(record=pending.log[1])
    assert pending.blocked_on.seq == 1
    goldens["retry_pending_second_attempt"] = _record(
        "golden_retry", "unfinished: g_flaky failed once and waits for its retry timer", pending, [7],
        resume_result_repr=repr({"failure": ["ValueError", "bad input 7", 3], "value": 70}))
    # race (a signal wins, the timer is cancelled), all, updates waking a condition, a patch
    # marker, and a cancellation handled by the workflow.
    semantics = Script(golden_semantics, 5)
    semantics.signal("go", "went")
    semantics.finish(2, "reservation-x")
    semantics.finish(3, fixed_random(3))
    semantics.update("add", 2)
    semantics.update("add", 3)
    semantics.finish(7, True)  # the patch marker, reached live
    semantics.cancel()
    semantics.finish(9, fixed_uuid(9))
    semantics.workflow_id, semantics.run_id = "golden-semantics-1", "run-1"  # type: ignore[attr-defined]
    assert semantics.final is not None and semantics.final.kind == "complete", semantics.final
    goldens["semantics_race_all_update_patch_cancel"] = _record(
        "golden_semantics", "a race won by a signal (its timer cancelled), all over an activity and random, "
        "two updates waking a condition, a patch marker, a cancellation caught with cleanup", semantics, [5])
    return goldens


def write_goldens(force: bool = False) -> None:
    HISTORIES.mkdir(exist_ok=True)
    for name, data in build_goldens().items():
        path = HISTORIES / f"{name}.json"
        if path.exists() and not force:
            print(f"kept    {path} (exists; --force overwrites)")
            continue
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"written {path}")


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/workflow/test_golden_histories.py --write [--force]")
    write_goldens(force="--force" in sys.argv)
