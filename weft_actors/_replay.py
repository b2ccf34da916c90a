"""A recorded history replayed against a workflow's code, writing nothing: whether the code
still produces the recorded ops (the ``replay`` command, ``check``, and a rolling deploy's
check of the new code before any shard is replaced).
"""

from __future__ import annotations

from typing import Any

from . import history
from .codec import decode, decode_args
from .errors import UnknownWorkflowType
from .workflow import WorkflowRun, collect_workflows, with_system_workflows

__all__ = ["replay_history", "replay_report"]


def replay_report(definition: Any, workflow_id: str, record: dict[str, Any], ops: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Replay a recorded history against ``definition`` without executing or writing anything.

    ``ok`` is False at the first divergence (``NonDeterminismError``'s message says where).
    """
    run = WorkflowRun(definition, workflow_id, record["run_id"], decode_args(record["args"]), dict(ops))
    try:
        commands = run.start()
    finally:
        run.close()
    recorded = sum(1 for op in ops.values() if "t" in op)
    report: dict[str, Any] = {"id": workflow_id, "type": record["type"], "status": record["status"], "recorded_outcomes": recorded}
    command = commands[0] if commands else None
    if command is None:
        report.update(ok=True, next=None)
    elif command.kind == "stuck":
        report.update(ok=False, divergence=command.error["message"])  # type: ignore[index]
    elif command.kind == "op":
        report.update(ok=True, next={"seq": command.seq, "kind": command.op.kind, "name": command.op.name})  # type: ignore[union-attr]
    elif command.kind == "complete":
        same = record["status"] != "completed" or decode(command.payload) == decode(record["result"])  # type: ignore[arg-type]
        report.update(ok=same, next="complete")
        if not same:
            report["divergence"] = "replay completed with a different result than the recorded one"
    else:
        expected = record["status"] in ("failed", "running", "stuck")  # stuck: its run has not ended
        report.update(ok=expected, next="fail", error=command.error.get("message") if command.error else None)
        if not expected:
            report["divergence"] = f"replay fails but the recorded run ended {record['status']}"
    return report


def replay_history(recorded: history.History, app: Any, app_name: str | None = None) -> dict[str, Any]:
    """``replay_report`` of ``recorded`` against the workflow of its type in ``app`` (a
    module, or a list of ``@workflow`` functions); ``UnknownWorkflowType`` if it has none."""
    definitions = with_system_workflows(collect_workflows(app))
    wf_type = recorded.record["type"]
    definition = definitions.get(wf_type)
    if definition is None:
        raise UnknownWorkflowType(f"{app_name or 'the app'} has no workflow {wf_type!r}", workflow_type=wf_type)
    return replay_report(definition, recorded.workflow_id, recorded.record, recorded.ops)
