"""Publishing what user code is on the loop now, around each piece of it the engine runs.

The engine's loop slot (``store.LoopSlot``) says which workflow's code holds the loop: the
watchdog's stall note and the supervisor's death record are made from it, and a takeover
charges only the workflow it names (``store._blame``). So every piece of user code that runs
inline on the loop is wrapped: a workflow turn (``turn``, the run's start and every delivery),
a query, an update's validator and handler (``running``), an ``async def`` activity's steps
(``_activities``). Code in threads (plain ``def`` activities) never holds the loop.

Cost on the hot path: one attribute chain and a ``None`` test without a slot (an engine
without background tasks); with one, one slot write before and one byte after each turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final, Protocol, TypeVar

if TYPE_CHECKING:
    from ..store import LoopSlot
    from ..workflow import Command, WorkflowRun

__all__ = ["ACTIVITY", "WORKFLOW_CODE", "QUERY", "UPDATE", "turn", "start", "running"]

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
    def wid(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def run(self) -> WorkflowRun: ...

    @property
    def engine(self) -> _Host: ...


def turn(actor: _Actor) -> list[Command]:
    """``actor.run.deliver()``, published as the workflow's code while it runs."""
    slot = actor.engine.activities.on_loop
    run = actor.run
    if slot is None:
        return run.deliver()
    slot.enter(actor.wid, actor.run_id, run.next_seq, WORKFLOW_CODE)
    try:
        return run.deliver()
    finally:
        slot.leave()


def start(host: _Host, wid: str, run_id: str, run: WorkflowRun) -> list[Command]:
    """``run.start()`` (the first turn of a run, or its replay), published likewise."""
    slot = host.activities.on_loop
    if slot is None:
        return run.start()
    slot.enter(wid, run_id, None, WORKFLOW_CODE)
    try:
        return run.start()
    finally:
        slot.leave()


def running(host: _Host, run: WorkflowRun, kind: str, name: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``: a query or update handler of ``run``, published as ``kind``
    ``name`` while it runs (not on the per-step path)."""
    slot = host.activities.on_loop
    if slot is None:
        return call(*args, **kwargs)
    slot.enter(run.workflow_id, run.run_id, run.next_seq, kind, name)
    try:
        return call(*args, **kwargs)
    finally:
        slot.leave()
