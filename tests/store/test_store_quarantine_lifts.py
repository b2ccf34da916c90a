"""Conformance: a lifted quarantine stays in the workflow's record (when, by whom, why, and
what it had been quarantined for), the newest ``LIFTS_KEPT`` of them, on every store."""

from __future__ import annotations

from typing import Any

import pytest

from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow, LiftQuarantine, QuarantineWorkflow, check_store
from weft_actors.store._lifts import LIFTS_KEPT, MAX_NOTE, note_lift

from .conftest import new_run_id

pytestmark = pytest.mark.timeout(60)


def _quarantined(kit: Any, engine: str, wid: str | None = None) -> tuple[str, str]:
    wid = wid or kit.wid("Poison")
    run_id = new_run_id()
    (created,) = kit.store.apply(engine, [CreateWorkflow(wid, "Poison", encode_args(()), run_id, "error", None, None, None, None)])
    assert isinstance(created, Created) and created.status == "running", created
    (parked,) = kit.store.apply(engine, [QuarantineWorkflow(wid, created.epoch, run_id)])
    assert not isinstance(parked, Exception), parked
    return wid, run_id


def test_a_lift_is_kept_in_the_record_with_when_who_and_why(store_factory: Any, kit: Any) -> None:
    store = kit.store
    engine = kit.engine()
    wid, run_id = _quarantined(kit, engine)
    kit.clock.advance(0.25)
    (lifted,) = store.apply(engine, [LiftQuarantine(wid, "console 127.0.0.1", "fixed in v2")])
    assert lifted["status"] == "running", lifted
    record = store.get_workflow(wid)
    assert record["status"] == "running"
    (lift,) = record["lifted"]
    assert lift["at"] == kit.clock.now() and lift["by"] == "console 127.0.0.1" and lift["reason"] == "fixed in v2"
    assert lift["run_id"] == run_id
    if store_factory.name == "lmdb":
        assert check_store(store_factory.location, kit.clock.now()) == []


def test_a_lift_without_a_name_says_unknown_and_a_long_reason_is_cut(store_factory: Any, kit: Any) -> None:
    engine = kit.engine()
    wid, _ = _quarantined(kit, engine)
    (lifted,) = kit.store.apply(engine, [LiftQuarantine(wid, None, "x" * 10_000)])
    assert not isinstance(lifted, Exception), lifted
    (lift,) = kit.store.get_workflow(wid)["lifted"]
    assert lift["by"] == "unknown" and lift["reason"] == "x" * MAX_NOTE  # a note, not a payload


def test_only_the_newest_lifts_are_kept() -> None:
    record: dict[str, Any] = {"run_id": "r"}
    for i in range(LIFTS_KEPT + 3):
        note_lift(record, {"count": 1}, float(i), f"by {i}", None)
    assert [lift["by"] for lift in record["lifted"]] == [f"by {i}" for i in range(3, LIFTS_KEPT + 3)]
