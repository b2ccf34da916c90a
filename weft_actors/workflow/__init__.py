"""Authoring API and the deterministic driver. No I/O here: (op log, outcomes) -> commands."""

from ._api import (
    ActivityDefinition,
    ActivityInfo,
    RetryPolicy,
    WorkflowDefinition,
    activity,
    activity_definition,
    collect_workflows,
    current_activity,
    workflow,
    workflow_definition,
)
from ._context import Context
from ._driver import WorkflowRun
from ._stack import stack_answer, stack_of
from ._ops import (
    CHILD_DONE_SIGNAL,
    HANDLER,
    PARENT_CLOSE,
    UPDATE,
    ActivityOp,
    ChildOp,
    Combinator,
    ConditionOp,
    ContinueAsNew,
    Op,
    PatchOp,
    SignalOp,
    SleepOp,
    ValueOp,
)
from ._schedule import fired_id, run_schedule
from ._records import CANCEL_REQUESTED, Command, cancelled_record, contained, error_from_record, error_record



SYSTEM_TYPES = frozenset({"weft.schedule"})
"""Workflow types every engine registers whatever its app: engine records name only the
app's own (``types``), and every engine counts as running these."""


def with_system_workflows(definitions: dict[str, WorkflowDefinition]) -> dict[str, WorkflowDefinition]:
    """``definitions`` plus the workflows every engine runs (schedules), unless the app
    defines a type of that name itself."""
    schedule = workflow_definition(run_schedule)
    assert schedule is not None
    definitions.setdefault(schedule.name, schedule)
    return definitions


__all__ = [
    "SYSTEM_TYPES",
    "with_system_workflows",
    "run_schedule",
    "fired_id",
    "CANCEL_REQUESTED",
    "HANDLER",
    "PARENT_CLOSE",
    "UPDATE",
    "ActivityDefinition",
    "ActivityInfo",
    "ActivityOp",
    "ChildOp",
    "CHILD_DONE_SIGNAL",
    "Combinator",
    "Command",
    "ConditionOp",
    "Context",
    "ContinueAsNew",
    "Op",
    "PatchOp",
    "RetryPolicy",
    "SignalOp",
    "SleepOp",
    "ValueOp",
    "WorkflowDefinition",
    "WorkflowRun",
    "stack_of",
    "stack_answer",
    "activity",
    "activity_definition",
    "cancelled_record",
    "collect_workflows",
    "contained",
    "current_activity",
    "error_from_record",
    "error_record",
    "workflow",
    "workflow_definition",
]
