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
from ._driver import Command, WorkflowRun, error_from_record, error_record
from ._ops import HANDLER, ActivityOp, Op, SignalOp, SleepOp, ValueOp

__all__ = [
    "HANDLER",
    "ActivityDefinition",
    "ActivityInfo",
    "ActivityOp",
    "Command",
    "Context",
    "Op",
    "RetryPolicy",
    "SignalOp",
    "SleepOp",
    "ValueOp",
    "WorkflowDefinition",
    "WorkflowRun",
    "activity",
    "activity_definition",
    "collect_workflows",
    "current_activity",
    "error_from_record",
    "error_record",
    "workflow",
    "workflow_definition",
]
