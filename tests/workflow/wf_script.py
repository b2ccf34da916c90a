"""Driving ``WorkflowRun`` by hand, for several pending ops at once.

``FakeEngine`` (``wf_harness``) runs each op at once, in issue order. ``Script`` lets a test
decide which pending op finishes when (so a race can be won by any branch), does what the shard
does with ``cancel``/``resolve`` commands (records the outcome, as one commit, then delivers),
and keeps the op log as the store would (every record through ``pack``/``unpack``), so that
``replay()`` can check that the recorded log drives a fresh run to the same place.
"""

from __future__ import annotations

import copy
from typing import Any

from weft_actors.codec import decode, encode, unpack_record
from weft_actors.workflow import CANCEL_REQUESTED, Command, WorkflowDefinition, WorkflowRun, cancelled_record, workflow_definition

__all__ = ["Script"]


def _definition(fn: Any) -> WorkflowDefinition:
    definition = workflow_definition(fn)
    assert definition is not None, fn
    return definition


class Script:
    def __init__(self, fn: Any, *args: Any, history: dict[int, dict[str, Any]] | None = None) -> None:
        self.fn = fn
        self.args = args
        self.log: dict[int, dict[str, Any]] = copy.deepcopy(history) if history else {}
        self.run = WorkflowRun(_definition(fn), "wf-1", "run-1", args, copy.deepcopy(history) if history else None)
        self.pending: dict[int, Command] = {}
        self.cancelled: list[int] = []
        self.resolved: list[int] = []
        self.final: Command | None = None
        self.commands: list[Command] = []
        self._inbox_seq = 100
        self._take(self.run.start())

    # -- what is going on -----------------------------------------------------------------

    def ops(self) -> list[tuple[int, str, str]]:
        """``(seq, kind, name)`` of the ops the engine would be executing, by seq."""
        return [(seq, cmd.op.kind, cmd.op.name) for seq, cmd in sorted(self.pending.items())]  # type: ignore[union-attr]

    def result(self) -> Any:
        assert self.final is not None and self.final.kind == "complete", self.final
        return decode(self.final.payload)

    # -- making things happen -------------------------------------------------------------

    def finish(self, seq: int, value: Any = None, *, error: dict[str, Any] | None = None, **extra: Any) -> None:
        """Op ``seq`` finished with ``value`` (or ``error``): record, commit, deliver."""
        assert seq in self.pending, (seq, self.ops())
        del self.pending[seq]
        self._record(seq, ok=None if error is not None else encode(value), err=error, **extra)
        self._take(self.run.deliver())

    def signal(self, name: str, payload: Any = None) -> bool:
        """A signal arrives: consumed by the wanted ``wait_signal`` (lowest seq) or applied by
        a handler; False if neither wants it (it would stay buffered)."""
        self._inbox_seq += 1
        seq = self.run.wanted_signal(name)
        if seq is not None:
            self.finish(seq, payload, inbox=self._inbox_seq)
            return True
        if name in self.run.signal_handlers:
            seq, packed = self.run.record_handler(name, encode(payload), self._inbox_seq)
            self.log[seq] = unpack_record(packed)
            self._take(self.run.deliver())
            return True
        return False

    def update(self, name: str, *args: Any, request_id: str = "r") -> tuple[str, Any]:
        """``("ok", value)``, ``("err", record)`` or ``("rejected", error)``, as the engine
        would answer the caller."""
        self._inbox_seq += 1
        try:
            self.run.validate_update(name, args)
        except Exception as exc:
            return "rejected", exc
        seq, packed, record = self.run.record_update(name, args, encode(list(args)), self._inbox_seq, request_id, 1 << 20)
        self.log[seq] = unpack_record(packed)
        self._take(self.run.deliver())
        return ("ok", decode(record["ok"])) if "ok" in record else ("err", record["err"])

    def cancel(self) -> None:
        """A cancel request, as the shard applies it: every awaited op gets a cancelled outcome."""
        seqs = self.run.pending_seqs()
        assert seqs, "nothing awaited"
        for seq in seqs:
            self.pending.pop(seq, None)
            self._record(seq, err=cancelled_record(CANCEL_REQUESTED))
        self._take(self.run.deliver())

    def replay(self) -> Script:
        """A fresh run over the op log recorded so far."""
        return Script(self.fn, *self.args, history=self.log)

    # -- internals ------------------------------------------------------------------------

    def _record(self, seq: int, **kwargs: Any) -> None:
        self.log[seq] = unpack_record(self.run.record_outcome(seq, **kwargs))

    def _take(self, commands: list[Command]) -> None:
        while commands:
            self.commands.extend(commands)
            recorded = False
            for cmd in commands:
                if cmd.kind == "op":
                    self.pending[cmd.seq] = cmd
                elif cmd.kind == "cancel":
                    self.pending.pop(cmd.seq, None)
                    self.cancelled.append(cmd.seq)
                    self._record(cmd.seq, err=cmd.error)
                    recorded = True
                elif cmd.kind == "resolve":
                    self.pending.pop(cmd.seq, None)
                    self.resolved.append(cmd.seq)
                    self._record(cmd.seq, ok=cmd.payload, err=cmd.error)
                    recorded = True
                else:
                    self.final = cmd
            commands = self.run.deliver() if recorded else []
