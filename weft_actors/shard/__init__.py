"""The shard: workflow actors, group commit, activities, timers, maintenance."""

from ._engine import Engine, validate_timing
from ._handle import WorkflowHandle

__all__ = ["Engine", "WorkflowHandle", "validate_timing"]
