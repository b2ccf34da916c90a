"""The shard: workflow actors, group commit, activities, timers, maintenance."""

from ._call_replies import CallReply, call_reply
from ._committer import answer_reply
from ._engine import Engine
from ._handle import WorkflowHandle
from ._options import EngineOptions
from ._outcome import raise_for_outcome, update_outcome
from ._validate import validate_timing

__all__ = [
    "CallReply", "Engine", "EngineOptions", "WorkflowHandle", "answer_reply", "call_reply", "raise_for_outcome", "update_outcome",
    "validate_timing",
]
