"""Where a live run waits: its coroutine chain's frames and the ops it awaits, for a stack
trace (``describe()["stack"]``, ``python -m weft_actors stack ID``).

Pure: it reads the suspended coroutines (``cr_await`` from the workflow body down to the op
it yields) and the driver's table of pending ops; the engine adds what only it knows (a
timer's fire time, an activity attempt's number). Cheap enough for ``describe``: a few
frames, nothing run or replayed; it is never called on the hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..errors import InvalidRequest, WorkflowClosed
from ._ops import ChildOp, ConditionOp, Op

if TYPE_CHECKING:
    from ._driver import WorkflowRun

__all__ = ["stack_of", "stack_answer"]

_ENDED: Final = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out", "continued"})


def stack_of(run: WorkflowRun) -> list[dict[str, Any]]:
    """The run's await chain, outermost first: one entry per suspended coroutine (its
    ``function``, ``file`` and ``line``); the innermost has ``waits_on``, the ops it awaits
    (``seq``, ``kind``, ``name``, and for a condition its predicate, for a child its id).
    Empty for a run that is not suspended (ended, or never started)."""
    frames: list[dict[str, Any]] = []
    awaited: Any = run._coro
    while awaited is not None and hasattr(awaited, "cr_frame"):
        frame = awaited.cr_frame
        if frame is None:  # finished
            break
        frames.append({"function": frame.f_code.co_name, "file": frame.f_code.co_filename, "line": frame.f_lineno})
        awaited = awaited.cr_await
    if frames:
        frames[-1]["waits_on"] = [_op_entry(run, seq) for seq in run.pending_seqs()]
    return frames


def _op_entry(run: WorkflowRun, seq: int) -> dict[str, Any]:
    op: Op | None = run.waiting if seq == run.waiting_seq else run._op_at(seq)
    record = run.history.get(seq) or {}
    if op is None:
        return {"seq": seq, "kind": record.get("kind"), "name": record.get("name")}
    entry: dict[str, Any] = {"seq": seq, "kind": op.kind, "name": op.name}
    if isinstance(op, ConditionOp):
        code = getattr(op.predicate, "__code__", None)
        entry["name"] = getattr(op.predicate, "__qualname__", repr(op.predicate))
        if code is not None:
            entry["predicate"] = {"file": code.co_filename, "line": code.co_firstlineno}
    elif isinstance(op, ChildOp):
        entry["child_id"] = record.get("child_id") or op.id
    return entry


def stack_answer(described: dict[str, Any]) -> list[dict[str, Any]]:
    """``described["stack"]`` of a ``describe()`` answer, for the ``stack()`` of a handle:
    ``WorkflowClosed`` if the workflow has ended, ``InvalidRequest`` (with its ``status``) if
    none of its code is running (``pending``, ``quarantined``, ``stuck``) or the engine that
    answered neither runs it nor can replay it."""
    wid, status, stack = described.get("id"), described.get("status"), described.get("stack")
    if status in _ENDED:
        raise WorkflowClosed(f"workflow {wid!r} has finished ({status}); it has no stack", workflow_id=wid, status=status)
    if status != "running":
        raise InvalidRequest(f"workflow {wid!r} is {status}: none of its code is running, so it has no stack", workflow_id=wid, status=status)
    if stack is None:
        raise InvalidRequest(
            f"workflow {wid!r} could not be read where it waits: the engine that answered does not run it "
            "and cannot replay it (its type is not registered there, its history was pruned, or its replay "
            "diverges); ask again, or after its next step",
            workflow_id=wid,
            status=status,
        )
    return list(stack)
