"""``--log-json`` end to end: a shard's workflow event lines are JSON objects carrying the
event's fields (workflow id, type, op, attempt, ...) as keys, one line per event."""

from __future__ import annotations

import json

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.errors import WorkflowFailed

pytestmark = pytest.mark.timeout(90)


def _entries(sup: RunningSupervisor, wid: str) -> list[dict]:
    found = []
    for line in sup.log_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("workflow_id") == wid:
            found.append(entry)
    return found


def test_workflow_events_are_json_lines_with_their_fields(tmp_path):
    args = ("--log-json", "--heartbeat", "0.2", "--ttl", "0.6")
    with RunningSupervisor(tmp_path / "data", shards=1, app="supervisor_app", args=args) as sup, Client(sup.endpoint, timeout=10) as client:
        handle = client.start("failing", "no way", id="json-1")
        with pytest.raises(WorkflowFailed):
            handle.result(timeout=30)  # three attempts, with 1 s and 2 s between them
        entries = wait_until(lambda: [e for e in _entries(sup, "json-1") if e["event"] == "workflow_failed"] and _entries(sup, "json-1"), timeout=10, what="the failure's line")
        assert [e["event"] for e in entries] == [
            "activity_attempt_failed", "activity_retry_scheduled",
            "activity_attempt_failed", "activity_retry_scheduled",
            "activity_attempt_failed", "workflow_failed",
        ]
        assert {e["process"] for e in entries} == {"shard-0"} and {e["workflow_type"] for e in entries} == {"failing"}
        [engine_id] = [shard["engine_id"] for shard in client.stats()["shards"]]
        assert {e["engine_id"] for e in entries} == {engine_id}
        attempts = [e for e in entries if e["event"] != "workflow_failed"]
        assert all(e["op"] == "refuse" and e["op_kind"] == "activity" and e["op_seq"] == 0 for e in attempts)
        assert [e["attempt"] for e in attempts] == [1, 2, 2, 3, 3]
        assert [e["level"] for e in attempts] == ["INFO", "INFO", "INFO", "INFO", "WARNING"]
        assert [e["retry_in"] for e in attempts if "retry_in" in e] == [1.0, 2.0]
        assert all(e["error_type"] == "ValueError" and e["error"] == "no way" for e in attempts if "error" in e)
        failed = entries[-1]
        assert failed["level"] == "WARNING" and failed["error_type"] == "weft_actors.errors.ActivityError"
        assert failed["message"].startswith("workflow json-1 (failing) failed: weft_actors.errors.ActivityError: ")
