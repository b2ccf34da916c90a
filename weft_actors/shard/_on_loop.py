"""Keeping the record of what user code is on the loop now, around each piece of it.

The engine's loop slot (``store.LoopSlot``) says which workflow's code holds the loop: the
watchdog copies it into the slot's shared file once that code has kept the loop from turning
for a tick, and the stall note and the supervisor's death record are made from that file; a
takeover charges only the workflow it names (``store._blame``). So every piece of user code
that runs inline on the loop sets ``slot.current`` before and clears it after: a workflow turn
(``turn``, ``start``: the run), a query or an update's validator and handler (``running``: the
run, the kind and the name), an ``async def`` activity's steps (``_activities``: its
``ActivityInfo``). Code in threads (plain ``def`` activities) never holds the loop.

Cost on the hot path: two attribute stores per piece, nothing shared and no clock read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final, Protocol, TypeVar

from ..workflow import ActivityInfo, WorkflowRun

if TYPE_CHECKING:
    from ..store import LoopSlot
    from ..workflow import Command

__all__ = ["ACTIVITY", "WORKFLOW_CODE", "QUERY", "UPDATE", "turn", "start", "running", "describe"]

ACTIVITY: Final = "activity"
WORKFLOW_CODE: Final = "workflow code"
QUERY: Final = "query"
UPDATE: Final = "update"

T = TypeVar("T")


class _Activities(Protocol):
    @property
    def on_loop(self) -> LoopSlot | None: ...


class _Host(Protocol):
    @property
    def activities(self) -> _Activities: ...


class _Actor(Protocol):
    @property
    def run(self) -> WorkflowRun: ...

    @property
    def engine(self) -> _Host: ...


def turn(actor: _Actor) -> list[Command]:
    """``actor.run.deliver()``, recorded as the workflow's code while it runs."""
    slot = actor.engine.activities.on_loop
    run = actor.run
    if slot is None:
        return run.deliver()
    slot.current = run
    try:
        return run.deliver()
    finally:
        slot.current = None


def start(host: _Host, run: WorkflowRun) -> list[Command]:
    """``run.start()`` (the first turn of a run, or its replay), recorded likewise."""
    slot = host.activities.on_loop
    if slot is None:
        return run.start()
    slot.current = run
    try:
        return run.start()
    finally:
        slot.current = None


def running(host: _Host, run: WorkflowRun, kind: str, name: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``: a query or update handler of ``run``, recorded as ``kind``
    ``name`` while it runs (not on the per-step path)."""
    slot = host.activities.on_loop
    if slot is None:
        return call(*args, **kwargs)
    slot.current = (run, kind, name)
    try:
        return call(*args, **kwargs)
    finally:
        slot.current = None


def describe(current: Any) -> tuple[str, str, int | None, str, str | None] | None:
    """``(wid, run_id, op seq, kind, name)`` of a slot's ``current`` (None: nobody's code).
    Read by the watchdog thread while the loop is stuck in that code, so it stands still."""
    if type(current) is ActivityInfo:
        return current.workflow_id, current.run_id, current.seq, ACTIVITY, current.activity
    if isinstance(current, WorkflowRun):
        return current.workflow_id, current.run_id, current.next_seq, WORKFLOW_CODE, None
    if isinstance(current, tuple) and len(current) == 3 and isinstance(current[0], WorkflowRun):
        run, kind, name = current
        return run.workflow_id, run.run_id, run.next_seq, kind, name
    return None
