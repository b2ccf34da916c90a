"""The one log line per workflow event (``shard/_events``): a workflow that fails, an activity
attempt that fails or times out, a retry scheduled, a quarantine, a takeover. Each names the
workflow, its type and its op in the text and carries them as fields, which ``--log-json``
writes under the same names; a step that went well logs nothing."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.errors import WorkflowFailed
from weft_actors.store import stall_note_path, write_stall_note
from weft_actors.supervisor._config import _JsonFormatter
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(20)

CALLS: dict[str, int] = {}
GATE: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh_state() -> None:
    CALLS.clear()
    GATE.clear()


@activity
async def fine(x: int) -> int:
    return x + 1


@activity(retry=RetryPolicy(max_attempts=2, initial_interval=0.01))
async def flaky(key: str) -> str:
    CALLS[key] = CALLS.get(key, 0) + 1
    if CALLS[key] == 1:
        raise ConnectionError(f"{key}: first call fails")
    return f"{key} ok"


@activity(retry=RetryPolicy(max_attempts=1))
async def broken(key: str) -> str:
    raise ValueError(f"{key} is broken")


@activity(retry=RetryPolicy(max_attempts=1), start_to_close=0.05)
async def slow(key: str) -> str:
    await asyncio.sleep(30)
    return key


@activity
async def hangs(key: str) -> str:
    await GATE[key].wait()
    return key


@workflow
async def recovers(ctx, key: str) -> str:
    first = await ctx.run(fine, 1)
    return f"{first} {await ctx.run(flaky, key)}"


@workflow
async def gives_up(ctx, key: str) -> str:
    return await ctx.run(broken, key)


@workflow
async def too_slow(ctx, key: str) -> str:
    return await ctx.run(slow, key)


@workflow
async def stuck_on(ctx, key: str) -> str:
    return await ctx.run(hangs, key)


APP = [recovers, gives_up, too_slow, stuck_on]


def events(caplog: pytest.LogCaptureFixture, name: str, wid: str | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name and (wid is None or getattr(r, "workflow_id", None) == wid)]


def fields(record: logging.LogRecord, *names: str) -> dict[str, Any]:
    return {name: getattr(record, name) for name in names}


def test_a_failed_attempt_and_its_retry_each_log_one_line_with_the_op(tmp_path, caplog):
    async def main():
        with caplog.at_level(logging.INFO, logger="weft_actors.shard"):
            async with Engine(str(tmp_path), app=APP) as engine:
                assert await engine.execute(recovers, "k1", id="r-1", timeout=5) == "2 k1 ok"
                run_id = (await engine.describe("r-1"))["run_id"]
                engine_id = engine.engine_id
        [failed] = events(caplog, "activity_attempt_failed", "r-1")
        assert failed.levelno == logging.INFO  # a retry follows
        assert fields(failed, "workflow_id", "workflow_type", "run_id", "engine_id", "op", "op_kind", "op_seq", "attempt", "error_type") == {
            "workflow_id": "r-1", "workflow_type": "recovers", "run_id": run_id, "engine_id": engine_id,
            "op": "flaky", "op_kind": "activity", "op_seq": 1, "attempt": 1, "error_type": "ConnectionError",
        }
        assert failed.error == "k1: first call fails"
        assert "workflow r-1 (recovers) op #1 activity 'flaky': attempt 1 failed: ConnectionError: k1: first call fails" == failed.getMessage()
        [retry] = events(caplog, "activity_retry_scheduled", "r-1")
        assert retry.levelno == logging.INFO
        assert fields(retry, "workflow_id", "workflow_type", "op", "op_seq", "attempt") == {"workflow_id": "r-1", "workflow_type": "recovers", "op": "flaky", "op_seq": 1, "attempt": 2}
        assert retry.retry_in == pytest.approx(0.01)
        assert "r-1 (recovers)" in retry.getMessage() and "'flaky'" in retry.getMessage()
        # The op that went well (``fine``, op #0) and the retry that did logged nothing.
        assert [r.event for r in caplog.records if hasattr(r, "event")] == ["activity_attempt_failed", "activity_retry_scheduled"]

    run(main())


def test_a_last_attempt_that_fails_or_times_out_warns_and_so_does_the_workflow_failing(tmp_path, caplog):
    async def main():
        with caplog.at_level(logging.INFO, logger="weft_actors.shard"):
            async with Engine(str(tmp_path), app=APP) as engine:
                for workflow_fn, wid in ((gives_up, "g-1"), (too_slow, "t-1")):
                    with pytest.raises(WorkflowFailed):
                        await engine.execute(workflow_fn, wid, id=wid, timeout=5)
        [last] = events(caplog, "activity_attempt_failed", "g-1")
        assert last.levelno == logging.WARNING and "no retry left" in last.getMessage()
        assert fields(last, "workflow_type", "op", "op_seq", "attempt", "error_type") == {"workflow_type": "gives_up", "op": "broken", "op_seq": 0, "attempt": 1, "error_type": "ValueError"}
        [timed_out] = events(caplog, "activity_attempt_timed_out", "t-1")
        assert timed_out.levelno == logging.WARNING and "attempt 1 timed out" in timed_out.getMessage()
        assert fields(timed_out, "workflow_type", "op", "op_seq", "attempt", "error_type") == {"workflow_type": "too_slow", "op": "slow", "op_seq": 0, "attempt": 1, "error_type": "TimeoutError"}
        assert not events(caplog, "activity_retry_scheduled")
        for wid, wf_type in (("g-1", "gives_up"), ("t-1", "too_slow")):
            [failed] = events(caplog, "workflow_failed", wid)
            assert failed.levelno == logging.WARNING
            assert failed.workflow_type == wf_type and failed.error_type == "weft_actors.errors.ActivityError"
            assert failed.getMessage().startswith(f"workflow {wid} ({wf_type}) failed: weft_actors.errors.ActivityError: ")

    run(main())


HEARTBEAT, TTL = 0.5, 1.5


def test_a_takeover_and_a_quarantine_each_log_one_line_with_the_workflow(tmp_path, caplog):
    async def main():
        clock = FakeClock()
        options = dict(app=APP, clock=clock, heartbeat=HEARTBEAT, ttl=TTL, background=False, quarantine_after=3)
        GATE["q"] = asyncio.Event()
        engines = [Engine(str(tmp_path), **options)]
        await engines[0].open()
        await engines[0].start(stuck_on, "q", id="q-1")
        run_id = (await engines[0].describe("q-1"))["run_id"]

        def running_or_parked() -> bool:  # the owner's commits landed: it runs the activity, or parked it
            return engines[-1].activities.inflight == 1 or engines[-1].store.get_workflow("q-1")["status"] == "quarantined"

        await eventually(running_or_parked)
        with caplog.at_level(logging.INFO, logger="weft_actors.shard"):
            for _ in range(3):  # each owner is lost while the activity stalls it: the third taker parks it
                note = {"wid": "q-1", "run_id": run_id, "kind": "activity", "name": "hangs", "seq": 0}
                write_stall_note(stall_note_path(engines[-1].store.path, engines[-1].engine_id), note)  # as its watchdog would
                clock.advance(TTL + 3 * HEARTBEAT)
                engines[-1].tick()  # expired: deposed
                taker = Engine(str(tmp_path), **options)
                await taker.open()  # takes it over at its first pass
                engines.append(taker)
                await eventually(running_or_parked)
        taken = events(caplog, "workflow_taken_over", "q-1")
        assert [r.from_engine for r in taken] == [e.engine_id for e in engines[:3]]
        assert [r.engine_id for r in taken] == [e.engine_id for e in engines[1:]]
        for record in taken:
            assert record.levelno == logging.INFO and record.workflow_type == "stuck_on" and record.epoch >= 2
            assert record.getMessage().startswith(f"workflow q-1 (stuck_on) taken over from engine {record.from_engine} (")
            assert record.getMessage().endswith(f", its lease expired) at epoch {record.epoch}")
        [parked] = events(caplog, "workflow_quarantined", "q-1")
        assert parked.levelno == logging.ERROR
        assert fields(parked, "workflow_id", "workflow_type", "run_id", "engine_id", "op", "op_kind", "op_seq", "lost_owners") == {
            "workflow_id": "q-1", "workflow_type": "stuck_on", "run_id": run_id, "engine_id": engines[-1].engine_id,
            "op": "hangs", "op_kind": "activity", "op_seq": 0, "lost_owners": 3,
        }
        assert "workflow q-1 (stuck_on) quarantined" in parked.getMessage() and "op #0 activity 'hangs'" in parked.getMessage()
        assert (await engines[-1].describe("q-1"))["status"] == "quarantined"
        for engine in engines:
            await engine.close()

    run(main())


def test_the_json_formatter_writes_an_events_fields_as_keys(tmp_path, caplog):
    async def main():
        with caplog.at_level(logging.INFO, logger="weft_actors.shard"):
            async with Engine(str(tmp_path), app=APP) as engine:
                await engine.execute(recovers, "k2", id="j-1", timeout=5)
        [retry] = events(caplog, "activity_retry_scheduled", "j-1")
        line = _JsonFormatter().format(retry)
        assert "\n" not in line
        entry = json.loads(line)
        assert entry["level"] == "INFO" and entry["logger"] == "weft_actors.shard" and entry["message"] == retry.getMessage()
        assert {key: entry[key] for key in ("event", "workflow_id", "workflow_type", "op", "op_kind", "op_seq", "attempt")} == {
            "event": "activity_retry_scheduled", "workflow_id": "j-1", "workflow_type": "recovers",
            "op": "flaky", "op_kind": "activity", "op_seq": 1, "attempt": 2,
        }
        assert entry["retry_in"] == pytest.approx(0.01) and entry["engine_id"] == retry.engine_id
        for key in ("args", "msg", "levelno", "pathname", "exc_info"):  # the record's own attributes stay out
            assert key not in entry

    run(main())


def test_a_large_takeover_logs_its_first_workflows_one_line_each_and_the_rest_in_one(tmp_path, caplog):
    async def main():
        clock = FakeClock()
        options = dict(app=APP, clock=clock, heartbeat=HEARTBEAT, ttl=TTL, background=False, quarantine_after=3)
        owner = Engine(str(tmp_path), **options)
        await owner.open()
        for i in range(50):
            GATE[f"big-{i}"] = asyncio.Event()
            await owner.start(stuck_on, f"big-{i}", id=f"big-{i}")
        await eventually(lambda: owner.activities.inflight == 50)
        clock.advance(TTL + 3 * HEARTBEAT)
        owner.tick()  # expired: deposed
        with caplog.at_level(logging.INFO, logger="weft_actors.shard"):
            taker = Engine(str(tmp_path), **options)
            await taker.open()
            await eventually(lambda: taker.activities.inflight == 50)
        single = [r for r in caplog.records if getattr(r, "event", None) == "workflow_taken_over"]
        [rest] = [r for r in caplog.records if getattr(r, "event", None) == "workflows_taken_over"]
        assert len(single) == 20
        assert (rest.count, rest.from_engine, rest.engine_id) == (30, owner.engine_id, taker.engine_id)
        assert rest.getMessage().startswith(f"30 more workflows taken over from engine {owner.engine_id} (")
        for key in GATE:
            GATE[key].set()
        for engine in (owner, taker):
            await engine.close()

    run(main())
