"""A start's flow control, computed by the engine that makes the start (``store._flow``
keeps the counts and the queue)."""

from __future__ import annotations

from typing import Any

from .._checks import check_priority
from ..errors import InvalidRequest
from ..store import Flow, flow_group
from ..workflow import WorkflowDefinition

__all__ = ["flow_of", "MAX_KEY_BYTES"]

MAX_KEY_BYTES = 256
"""A ``concurrency_key`` is part of LMDB keys, which hold at most 511 bytes."""


def flow_of(definition: WorkflowDefinition, args: tuple[Any, ...], priority: Any = None) -> Flow | None:
    """The flow control of starting ``definition(*args)``: None for a type without
    ``concurrency``. A key function that raises or returns a non-string refuses the start
    (``InvalidRequest``), as arguments that do not fit the signature do."""
    if priority is not None:
        priority = check_priority(priority)
    if definition.concurrency is None:
        return None
    key = None
    if definition.concurrency_key is not None:
        try:
            key = definition.concurrency_key(*args)
        except Exception as exc:
            raise InvalidRequest(f"concurrency_key of workflow {definition.name!r} raised {type(exc).__name__}: {exc}") from None
        if not isinstance(key, str):
            raise InvalidRequest(f"concurrency_key of workflow {definition.name!r} must return a str, not {type(key).__name__}")
        try:
            size = len(key.encode())
        except UnicodeEncodeError:
            raise InvalidRequest(f"concurrency_key of workflow {definition.name!r} returned a str that is not valid unicode") from None
        if size > MAX_KEY_BYTES:
            raise InvalidRequest(f"concurrency_key of workflow {definition.name!r} is {size} bytes; the limit is {MAX_KEY_BYTES}")
    return Flow(flow_group(definition.name, key), definition.concurrency, priority or 0)
