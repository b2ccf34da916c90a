"""The supervisor: shard process lifecycle and the ``python -m weft_actors.supervisor`` entry."""

from ._config import ShardConfig, SupervisorConfig
from ._supervisor import EXIT_OK, EXIT_RESTART_INTENSITY, EXIT_STARTUP, Supervisor

__all__ = ["EXIT_OK", "EXIT_RESTART_INTENSITY", "EXIT_STARTUP", "ShardConfig", "Supervisor", "SupervisorConfig"]
