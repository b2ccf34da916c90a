"""Several pending ops at once: ``all``/``race`` trees and ``wait_condition`` checks.

Mixed into ``WorkflowRun``. A combinator has no seq of its own: when it is awaited its leaf ops
get seqs in list order (depth first), and the driver settles the tree as leaf outcomes are
delivered in ``t`` order. ``race`` settles on the first leaf outcome delivered (lowest ``t``);
``all`` on the last, or on the first error. Settling kills the leaves still pending under it:
they become *dead* (a later delivery for them is ignored, live and in replay alike) and the
engine gets a ``cancel`` command for each that has no recorded outcome yet, so it stops the
work and records a cancelled outcome. Because the tree is rebuilt by the same code and the
outcomes arrive in the same order, replay settles every combinator exactly as the live run did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..codec import decode, encode
from ..errors import SerializationError
from ._ops import Combinator, ConditionOp, Op
from ._records import Command, cancelled_record, contained, error_from_record, error_record, op_label

__all__ = ["CombinatorMixin", "ENCODED_NONE"]

ENCODED_NONE = encode(None)
_new_tuple = tuple.__new__
_GROUP_KINDS = frozenset(("all", "race"))
_PATHS: dict[str, str] = {}
"""Interned group paths: every leaf of a run shares the few strings there are."""


class _Group:
    """One ``all``/``race`` node of the tree being awaited."""

    __slots__ = ("race", "parent", "index", "results", "remaining", "settled")

    def __init__(self, race: bool, parent: _Group | None, index: int, size: int) -> None:
        self.race = race
        self.parent = parent
        self.index = index
        self.results: list[Any] = [None] * size
        self.remaining = size
        self.settled = False


class _Slot:
    """A pending leaf op under a group."""

    __slots__ = ("op", "group", "index", "emitted")

    def __init__(self, op: Op, group: _Group, index: int) -> None:
        self.op = op
        self.group = group
        self.index = index
        self.emitted = False


class CombinatorMixin:
    """Bookkeeping for leaves under combinators, dead ops and pending conditions. Containers
    are made on first use: a parked run that never used them pays nothing for them."""

    if not TYPE_CHECKING:  # slots for the runtime; type checkers would flag every attribute
        __slots__ = ()  # the concrete class declares (a mixin's own __slots__ names none)

    history: Mapping[int, dict[str, Any]]
    next_seq: int
    waiting: Op | None
    waiting_seq: int
    outcome: Command | None
    cancel_requested: bool
    _events: list[tuple[int, int]] | tuple[()]
    _next_event: int
    _live_t: int
    _emitted_seq: int
    _slots: dict[int, _Slot] | None
    _dead: dict[int, Op] | None
    _paths: dict[int, str] | None
    _conditions: dict[int, ConditionOp] | None
    _resolving: set[int] | None
    _out: list[Command] | None
    _settled_now: tuple[Any, BaseException | None] | None
    _building: bool

    def _advance(self, value: Any, error: BaseException | None) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    def _stuck(self, message: str) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    # -- issuing a tree -------------------------------------------------------------------

    def _issue_group(self, op: Combinator) -> tuple[Any, BaseException | None] | None:
        """Give every leaf its seq; ``(value, error)`` if the tree settled at once (an empty
        ``all``), else None (blocked, or stuck)."""
        if self._slots is None:
            self._slots = {}
        self._building = True
        self._settled_now = None
        empties: list[_Group] = []
        try:
            self._build(op, None, 0, empties, op.kind)
            if self.outcome is not None:
                return None
            for group in empties:  # post-order, after every seq is given out: deterministic
                if group.settled:
                    continue
                group.settled = True
                if group.parent is None:
                    self._settle_root([], None)
                else:
                    self._settle(group.parent, group.index, [], None)
        finally:
            self._building = False
        if self._settled_now is not None:
            return self._settled_now
        self.waiting = op
        self.waiting_seq = -1
        return None

    def _build(self, op: Combinator, parent: _Group | None, index: int, empties: list[_Group], path: str) -> None:
        """Give the leaves of ``op`` (its ``path``: the kinds of the groups down to it, like
        ``"all/race"``) their seqs. Each leaf's record keeps its path (``"in"``), so replaying
        the same leaves under other combinators (a ``race`` made an ``all``) is caught."""
        group = _Group(op.kind == "race", parent, index, len(op.ops))
        if self._paths is None:
            self._paths = {}
        for position, child in enumerate(op.ops):
            if child.kind in _GROUP_KINDS:
                self._build(child, group, position, empties, _PATHS.setdefault(f"{path}/{child.kind}", f"{path}/{child.kind}"))  # type: ignore[arg-type]
                if self.outcome is not None:
                    return
                continue
            seq = self.next_seq
            self.next_seq = seq + 1
            record = self.history.get(seq)
            if record is not None and (record.get("kind") != child.kind or record.get("name") != child.name or record.get("in", path) != path):
                recorded = record.get("in")
                self._stuck(
                    f"replay issued {op_label(child.kind, child.name)} under {path} at #{seq} but the history has "
                    f"{op_label(record.get('kind'), record.get('name'))}" + ("" if recorded is None else f" under {recorded}")
                )
                return
            self._paths[seq] = path
            slot = _Slot(child, group, position)
            self._slots[seq] = slot  # type: ignore[index]
            if child.kind == "condition" and self._watch(seq, child):  # type: ignore[arg-type]
                slot.emitted = True
        if not op.ops:
            empties.append(group)

    # -- settling -------------------------------------------------------------------------

    def _deliver_slot(self, seq: int, record: dict[str, Any]) -> None:
        slot = self._slots.pop(seq)  # type: ignore[union-attr]
        if self._conditions:
            self._conditions.pop(seq, None)
            self._resolving.discard(seq)  # type: ignore[union-attr]
        value, error = self._recorded(record)
        self._settle(slot.group, slot.index, value, error)

    def _recorded(self, record: dict[str, Any]) -> tuple[Any, BaseException | None]:
        err = record.get("err")
        if err is not None:
            if err.get("kind") == "cancelled":
                self.cancel_requested = True
            return None, error_from_record(err)
        try:
            return (decode(record["ok"], "recorded outcome") if record["ok"] is not None else None), None
        except SerializationError as exc:
            return None, exc

    def _settle(self, group: _Group, index: int, value: Any, error: BaseException | None) -> None:
        while True:
            if group.settled:
                return
            if group.race or error is not None:
                group.settled = True
                if group.race and error is None:
                    value = (index, value)
                self._kill_under(group, "lost the race" if group.race else "a sibling failed")
            else:
                group.results[index] = value
                group.remaining -= 1
                if group.remaining:
                    return
                group.settled = True
                value = group.results
            parent = group.parent
            if parent is None:
                self._settle_root(value, error)
                return
            group, index = parent, group.index

    def _settle_root(self, value: Any, error: BaseException | None) -> None:
        if self._building:
            self._settled_now = (value, error)
        else:
            self._advance(value, error)

    def _kill_under(self, group: _Group, why: str) -> None:
        slots = self._slots
        for seq in sorted(slots):  # type: ignore[arg-type]
            slot = slots[seq]  # type: ignore[index]
            node: _Group | None = slot.group
            while node is not None and node is not group:
                node = node.parent
            if node is group:
                del slots[seq]  # type: ignore[union-attr]
                self._kill(seq, slot.op, why)

    def _kill(self, seq: int, op: Op, why: str) -> None:
        """``seq`` is no longer awaited: ignore its outcome; have the engine stop it."""
        if self._dead is None:
            self._dead = {}
        self._dead[seq] = op
        if self._conditions:
            self._conditions.pop(seq, None)
            self._resolving.discard(seq)  # type: ignore[union-attr]
        record = self.history.get(seq)
        if record is None or "t" not in record:
            self._command(_new_tuple(Command, ("cancel", seq, op, record, None, cancelled_record(why))))

    def _command(self, cmd: Command) -> None:
        if self._out is None:
            self._out = [cmd]
        else:
            self._out.append(cmd)

    def _emit_slots(self, out: list[Command] | None) -> list[Command] | None:
        slots = self._slots
        if not slots:
            return out
        history = self.history
        for seq in sorted(slots):
            slot = slots[seq]
            if slot.emitted:
                continue
            slot.emitted = True
            record = history.get(seq)
            if record is not None and "t" in record:
                continue
            cmd = _new_tuple(Command, ("op", seq, slot.op, record, None, None))
            if out is None:
                out = [cmd]
            else:
                out.append(cmd)
        return out

    # -- conditions -----------------------------------------------------------------------

    def _watch(self, seq: int, op: ConditionOp) -> bool:
        """Track a condition just issued; True if it already holds (resolved, nothing to run)."""
        if self._conditions is None:
            self._conditions = {}
            self._resolving = set()
        self._conditions[seq] = op
        record = self.history.get(seq)
        if record is not None and "t" in record:
            return False  # recorded: replay delivers it at its t
        return self._try_condition(seq, op)

    def _check_conditions(self) -> None:
        """After a handler changed workflow state: resolve every condition that now holds."""
        history = self.history
        for seq, op in list(self._conditions.items()):  # type: ignore[union-attr]
            record = history.get(seq)
            if seq in self._resolving or (record is not None and "t" in record):  # type: ignore[operator]
                continue
            self._try_condition(seq, op)

    def _try_condition(self, seq: int, op: ConditionOp) -> bool:
        try:
            held = op.predicate()
        except BaseException as exc:  # thrown at the wait, like any op's failure (never further)
            cmd = _new_tuple(Command, ("resolve", seq, op, self.history.get(seq), None, error_record(contained(exc, "condition predicate"))))
        else:
            if not held:
                return False
            cmd = _new_tuple(Command, ("resolve", seq, op, self.history.get(seq), ENCODED_NONE, None))
        self._resolving.add(seq)  # type: ignore[union-attr]
        self._command(cmd)
        # Never also hand the engine an "op" command for it (it may not have had one yet).
        if seq == self.waiting_seq:
            self._emitted_seq = seq
        elif self._slots and seq in self._slots:
            self._slots[seq].emitted = True
        return True

    # -- questions the engine asks --------------------------------------------------------

    def pending_seqs(self) -> list[int]:
        """Seqs of the ops the workflow awaits right now that have no recorded outcome."""
        history = self.history
        if self.waiting is None:
            return []
        if self.waiting_seq >= 0:
            record = history.get(self.waiting_seq)
            return [] if record is not None and "t" in record else [self.waiting_seq]
        return [seq for seq in sorted(self._slots or ()) if "t" not in (history.get(seq) or ())]

    def wanted_signal(self, name: str) -> int | None:
        """The lowest seq of a pending ``wait_signal(name)`` still wanted, if any: the only op
        the engine may consume a signal ``name`` for."""
        op = self.waiting
        if op is None:
            return None
        history = self.history
        seq = self.waiting_seq
        if seq >= 0:
            if op.kind == "signal" and op.name == name:
                record = history.get(seq)
                if record is None or "t" not in record:
                    return seq
            return None
        for seq in sorted(self._slots or ()):
            op = self._slots[seq].op  # type: ignore[index]
            if op.kind == "signal" and op.name == name and "t" not in (history.get(seq) or ()):
                return seq
        return None

    def _op_at(self, seq: int) -> Op | None:
        slot = self._slots.get(seq) if self._slots else None
        if slot is not None:
            return slot.op
        return self._dead.get(seq) if self._dead else None

    def _events_left(self, replayed_only: bool) -> bool:
        """Whether recorded events remain that are not for dead ops."""
        events = self._events
        dead = self._dead or ()
        for index in range(self._next_event, len(events)):
            t, seq = events[index]
            if seq not in dead and (not replayed_only or t < self._live_t):
                return True
        return False
