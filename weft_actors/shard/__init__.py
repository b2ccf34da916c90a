"""The shard: workflow actors, group commit, activities, timers, maintenance."""

from ._committer import answer_reply
from ._engine import Engine
from ._handle import WorkflowHandle
from ._messages import _answer as update_answer
from ._options import EngineOptions
from ._outcome import raise_for_outcome
from ._validate import validate_timing

__all__ = ["Engine", "EngineOptions", "WorkflowHandle", "answer_reply", "raise_for_outcome", "update_answer", "validate_timing"]
