"""weft_actors: a durable workflow engine for Python.

Write workflows as plain ``async def`` functions; the engine records every step in LMDB and
carries each workflow to completion through crashes, restarts and takeovers.
"""

import logging as _logging

from . import errors
from .bus import AsyncClient, AsyncClientHandle, Client, ClientHandle
from .codec import register_type
from .errors import WeftError
from ._schedule_handle import ScheduleHandle
from .shard import Engine, EngineOptions, WorkflowHandle
from .workflow import ActivityInfo, Context, RetryPolicy, activity, workflow

__all__ = [
    "ActivityInfo",
    "AsyncClient",
    "AsyncClientHandle",
    "Client",
    "ClientHandle",
    "Context",
    "Engine",
    "EngineOptions",
    "RetryPolicy",
    "ScheduleHandle",
    "WeftError",
    "WorkflowHandle",
    "activity",
    "errors",
    "register_type",
    "workflow",
]

__version__ = "0.1.0"

_logging.getLogger("weft_actors").addHandler(_logging.NullHandler())
