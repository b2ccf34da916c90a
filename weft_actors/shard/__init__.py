"""The shard: workflow actors, group commit, activities, timers, maintenance."""

from ._committer import answer_reply
from ._engine import Engine
from ._handle import WorkflowHandle
from ._options import EngineOptions
from ._validate import validate_timing

__all__ = ["Engine", "EngineOptions", "WorkflowHandle", "answer_reply", "validate_timing"]
