"""How a run records its op records: outcomes and started ops, in ``t`` order.

Mixed into ``WorkflowRun``, last in its bases (the concrete class and the other mixins come
first). These are the engine-facing record builders: the engine asks the run for the packed
record of an outcome or a started op, commits it, and the next ``deliver()`` hands the outcome
to the coroutine. They are their own piece because they only build and keep records; they
never drive the coroutine, which stays the driver's job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..codec import pack_record
from ._ops import Op

__all__ = ["RecordingMixin"]


class RecordingMixin:
    if not TYPE_CHECKING:  # slots for the runtime; type checkers would flag every attribute
        __slots__ = ()  # the concrete class declares (a mixin's own __slots__ names none)

    history: Mapping[int, dict[str, Any]]
    waiting: Op | None
    waiting_seq: int
    _next_t: int
    _paths: dict[int, str] | None

    def _op_at(self, seq: int) -> Op | None:  # provided by CombinatorMixin
        raise NotImplementedError

    def _keep(self, seq: int, record: dict[str, Any]) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    def _keep_outcome(self, seq: int, record: dict[str, Any]) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    def record_outcome(self, seq: int, ok: bytes | None = None, err: dict[str, Any] | None = None, **extra: Any) -> bytes:
        """The packed op record for ``seq``'s outcome; delivered by the next ``deliver()``."""
        record = self.outcome_record(seq, ok, err, **extra)
        self._next_t += 1  # made at the current t just now: keep_outcome without its check
        self._keep_outcome(seq, record)
        return pack_record(record)

    def outcome_record(self, seq: int, ok: bytes | None = None, err: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        """What ``record_outcome`` would record for ``seq`` now, without recording it: for an
        outcome committed before the run learns it (a signal its owner takes at once, in the
        transaction that appends it). ``keep_outcome`` then records it, unless the run
        recorded something else first."""
        op = self.waiting if seq == self.waiting_seq else self._op_at(seq)
        record = self.history.get(seq)
        record = dict(record) if record else {}
        if op is not None:
            record["kind"] = op.kind
            record["name"] = op.name
        record["t"] = self._next_t
        if err is None:
            record["ok"] = ok
        else:
            record["err"] = err
        record.update(extra)
        paths = self._paths
        if paths and seq in paths:
            record["in"] = paths[seq]
        return record

    def keep_outcome(self, seq: int, record: dict[str, Any]) -> None:
        """Record ``record`` (from ``outcome_record``) as ``seq``'s outcome, at its ``t``."""
        if record["t"] != self._next_t:
            raise RuntimeError(f"outcome of op {seq} was prepared at t={record['t']}, the run is at t={self._next_t}")
        self._next_t += 1
        self._keep_outcome(seq, record)

    def record_started(self, seq: int, **fields: Any) -> bytes:
        """The packed record of an op that has started but not finished (timer, retry, child)."""
        op = self.waiting if seq == self.waiting_seq else self._op_at(seq)
        record = {"kind": op.kind, "name": op.name} if op is not None else {}
        record.update(self.history.get(seq) or {})
        record.update(fields)
        paths = self._paths
        if paths and seq in paths:
            record["in"] = paths[seq]
        self._keep(seq, record)
        return pack_record(record)
