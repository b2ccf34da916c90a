"""Property: for any program of ops, a live run and its replays agree on every op and the result."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wf_harness import FakeEngine, events_in_t_order, prefix_by_seq, prefix_by_t

from weft_actors.errors import ActivityError
from weft_actors.workflow import HANDLER, RetryPolicy, activity, workflow


@activity
def double(x: int) -> int:
    return 2 * x


@activity
async def add(x: int, y: int) -> int:
    return x + y


@activity(retry=RetryPolicy(max_attempts=2, initial_interval=0.5))
def always_fails(message: str) -> None:
    raise ValueError(message)


@workflow
async def program(ctx, steps: list) -> dict:
    """Runs ``steps`` (op specs) in order; notes from handled signals are collected too."""
    notes: list = []
    ctx.on_signal("note", notes.append)
    out: list[Any] = []
    for step in steps:
        kind = step[0]
        if kind == "double":
            out.append(await ctx.run(double, step[1]))
        elif kind == "add":
            out.append(await ctx.run(add, step[1], step[2]))
        elif kind == "fail":
            try:
                await ctx.run(always_fails, step[1])
            except ActivityError as exc:
                out.append(["failed", exc.type, exc.cause_message, exc.attempts])
        elif kind == "sleep":
            out.append(await ctx.sleep(step[1]))
        elif kind == "now":
            out.append(await ctx.now())
        elif kind == "random":
            out.append(await ctx.random())
        elif kind == "uuid4":
            out.append(await ctx.uuid4())
        elif kind == "signal":
            try:
                out.append(await ctx.wait_signal(step[1], timeout=step[2]))
            except TimeoutError:
                out.append("timeout")
    return {"out": out, "notes": notes}


small = st.integers(min_value=-1000, max_value=1000)
steps_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("double"), small),
        st.tuples(st.just("add"), small, small),
        st.tuples(st.just("fail"), st.text(max_size=5)),
        st.tuples(st.just("sleep"), st.floats(min_value=0, max_value=100, allow_nan=False)),
        st.tuples(st.just("now")),
        st.tuples(st.just("random")),
        st.tuples(st.just("uuid4")),
        st.tuples(st.just("signal"), st.sampled_from(["a", "b"]), st.just(30.0)),
    ).map(list),
    max_size=8,
)
inbox_strategy = st.lists(st.tuples(st.sampled_from(["a", "b"]), small), max_size=4)
notes_strategy = st.dictionaries(st.integers(min_value=0, max_value=12), st.lists(small, min_size=1, max_size=2), max_size=3)

PROPERTY = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def op_sequence(log: dict[int, dict[str, Any]]) -> list[tuple[int, str, str]]:
    return [(seq, rec["kind"], rec["name"]) for seq, rec in sorted(log.items()) if rec["kind"] != HANDLER]


@PROPERTY
@given(steps=steps_strategy, inbox=inbox_strategy, notes=notes_strategy)
def test_live_run_and_full_replay_agree_on_result_and_ops(steps: list, inbox: list, notes: dict) -> None:
    arrivals = {seq: [("note", n) for n in values] for seq, values in notes.items()}
    live = FakeEngine(program, steps, inbox=inbox, arrivals=arrivals)
    final = live.run_to_end()
    assert final is not None and final.kind == "complete", final
    issued = [(c.seq, c.op.kind, c.op.name) for c in live.commands if c.kind == "op"]
    assert issued == op_sequence(live.log)
    assert len(issued) == len(steps)

    replay = FakeEngine(program, steps, history=live.log)
    assert replay.run_to_end() == final
    assert replay.activity_calls == []
    assert replay.log == live.log


@PROPERTY
@given(steps=steps_strategy, inbox=inbox_strategy)
def test_every_prefix_replays_to_the_next_recorded_op_and_resumes_to_the_same_result(steps: list, inbox: list) -> None:
    live = FakeEngine(program, steps, inbox=inbox)
    live.run_to_end()
    events = events_in_t_order(live.log)
    for cut in range(len(events) + 1):
        prefix = prefix_by_t(live.log, cut)
        consumed: dict[str, int] = {}
        for rec in prefix.values():
            if rec["kind"] == "signal" and "ok" in rec:
                consumed[rec["name"]] = consumed.get(rec["name"], 0) + 1
        still_buffered = []
        for name, payload in inbox:
            if consumed.get(name, 0):
                consumed[name] -= 1
            else:
                still_buffered.append((name, payload))

        resumed = FakeEngine(program, steps, history=prefix, inbox=still_buffered)
        [first] = resumed.start()
        if cut == len(events):
            assert first == live.final
        else:
            _, seq, rec = events[cut]
            assert (first.kind, first.seq, first.op.kind, first.op.name) == ("op", seq, rec["kind"], rec["name"])
        assert resumed.run_to_end() == live.final
        assert op_sequence(resumed.log) == op_sequence(live.log)
        calls = sum(1 for _, seq, rec in events[cut:] if rec["kind"] == "activity" for _ in range(rec["attempts"]))
        assert len(resumed.activity_calls) == calls


@PROPERTY
@given(steps=steps_strategy, k=st.integers(min_value=0, max_value=8))
def test_a_started_record_at_the_cut_is_handed_back_and_the_run_still_finishes_the_same(steps: list, k: int) -> None:
    live = FakeEngine(program, steps, inbox=[("a", 1), ("b", 2)] * 8)
    live.run_to_end()
    history = prefix_by_seq(live.log, k)
    finished = live.log.get(k)
    started = None
    if finished is not None:
        # op k as it stood before its outcome: timers keep fire_at, retried activities the state
        # after their next-to-last attempt
        started = {key: value for key, value in finished.items() if key not in ("t", "ok", "err", "inbox")}
        if finished["kind"] == "activity":
            started["attempts"] = finished["attempts"] - 1
            if started["attempts"] == 0:
                del started["attempts"]
        history[k] = started
    resumed = FakeEngine(program, steps, history=history, inbox=[("a", 1), ("b", 2)] * 8)
    [first] = resumed.start()
    if started is None:
        assert first == live.final
        return
    assert (first.kind, first.seq, first.record) == ("op", k, started)
    assert resumed.run_to_end().payload == live.final.payload
