"""A wait whose engine handed its workflows off goes on at the new owner (``WorkflowMoved``).

A ``result`` with a ``wait``, or an ``execute`` whose start is committed, may be waiting on a
shard when that shard hands its workflows to a successor (``Engine.hand_off``). The engine
fails such waits with ``EngineStopped``; for a wait that is wrong: the workflow is durable and
driven on, only its owner changed. So the shard answers ``WorkflowMoved`` instead, naming the
workflow, the ``wait`` left and (an ``execute``) the run it started, and the front door resends
it as a ``result`` to another shard (``bus._dispatch``). A ``result`` is a read: the start is
never applied again, whatever happens to the resent call.

A plain stop keeps ``EngineStopped``: nothing is handed to anyone. So does a supervisor's stop,
even when its shards hand off to another supervisor's (``_leaving``): no shard of its front
door is left to ask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..errors import EngineStopped, WorkflowMoved

if TYPE_CHECKING:
    from ..shard import Engine


class _Ops(Protocol):
    """What ``moved`` reads of the shard's ops (``ShardOps``)."""

    engine: Engine
    moves_waits: bool

__all__ = ["moved"]


def moved(ops: _Ops, error: BaseException, wid: str, wait_left: float, started: dict[str, Any] | None) -> BaseException:
    """``error`` as the waiting call's reply: ``WorkflowMoved`` if it is the ``EngineStopped``
    of an engine that hands its workflows off while its supervisor serves on
    (``ops.moves_waits``), else ``error`` itself."""
    if not isinstance(error, EngineStopped) or not ops.engine.starts.handing_off or not ops.moves_waits:
        return error
    context: dict[str, Any] = {"wid": wid, "wait": max(0.0, wait_left)}
    if started is not None:
        context["run_id"] = started["run_id"]
    return WorkflowMoved(f"workflow {wid!r} was handed to another engine while this call waited on it: its new owner answers", **context)
