"""What an actor does with its inbox, and with the children it starts.

``Inbox`` is a part its actor holds, made when the first message reaches it or it starts its
first child (most actors never get one), and knows its actor only by ``InboxOwner``. It keeps
the messages seen and not taken yet, the newest seq seen, and the children awaited.

Messages are taken one per commit, oldest first: a signal goes to the lowest-seq
``wait_signal`` still wanted (never to one that lost a race), else to its handler;
an update is validated on the owner before anything is recorded; a cancel request cancels
every op awaited right now; a child's ``child-done`` resolves the op that started it. Each
consumption is deleted in the transaction that records what it did: exactly-once delivery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from .. import _tracing
from ..codec import count_args, decode_args, encode, unpack_record
from ..errors import InvalidRequest, UpdateRejected, WeftError, WorkflowAlreadyExists
from ..store import TERMINAL, AppendAndConsume, AppendInbox, CancelOther, CreateChild, CreateWorkflow, Flow, PutRequest, TerminateOther
from ..workflow import CANCEL_REQUESTED, CHILD_DONE_SIGNAL, Command, cancelled_record, error_record
from ._call_replies import reply_at_answer
from ._flow import flow_of
from ._on_loop import UPDATE, running, turn
from ._validate import new_id
from ._writes import Writes, child_error, child_id_for

if TYPE_CHECKING:
    from .._clock import Clock
    from ..store import LmdbStore, TimerRef
    from ..workflow import ChildOp, WorkflowDefinition, WorkflowRun
    from ._activities import ActivityRunner
    from ._committer import GroupCommitter
    from ._waiters import Waiters

__all__ = ["InboxHost", "InboxOwner", "Inbox"]

_ENCODED_NONE = encode(None)


class InboxHost(Protocol):
    """What taking messages and starting children needs of the engine: the clock for records,
    the store (a child's existing record), the registered types (a child of one is claimed
    here), the payload limit, the loop slot (through the activities) and the update answer
    (and the calls waiting for it with a reply)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def store(self) -> LmdbStore: ...

    @property
    def workflows(self) -> Mapping[str, WorkflowDefinition]: ...

    @property
    def payload_limit(self) -> int: ...

    @property
    def activities(self) -> ActivityRunner: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def waiters(self) -> Waiters: ...

    def update_answered(self, wid: str, request_id: str) -> None: ...


class InboxOwner(Protocol):
    """What the inbox needs of its actor: its ids and run, whether it may act now (busy,
    closed, stuck, anything else pending), the writes and commit a message goes out in, the
    answer to send once it lands (``after``), and the ops, timers and cancellations it
    resolves."""

    @property
    def engine(self) -> InboxHost: ...

    @property
    def wid(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def run(self) -> WorkflowRun: ...

    @property
    def closed(self) -> bool: ...

    @property
    def stuck(self) -> bool: ...

    @property
    def ops(self) -> dict[int, Command]: ...

    @property
    def timers(self) -> dict[int, Any]: ...

    @property
    def attempts(self) -> dict[int, Any]: ...

    @property
    def wakes(self) -> list[Any]: ...

    busy: bool
    writes: Writes | None
    after: Callable[[], None] | None

    def poll(self) -> None: ...

    def handle(self, commands: list[Command]) -> None: ...

    def pending_writes(self) -> Writes: ...

    def commit(self, ops: tuple[tuple[int, bytes], ...] = (), consume: tuple[int, ...] = (), timers_put: tuple[TimerRef, ...] = (), timers_del: tuple[TimerRef, ...] = (), *, effects: tuple[Any, ...] = ()) -> None: ...

    def commit_writes(self, w: Writes) -> None: ...

    def clear_timer(self, seq: int, record: dict[str, Any] | None = None) -> tuple[TimerRef, ...]: ...

    def cancel_op(self, seq: int, kind: str, record: dict[str, Any] | None, error: dict[str, Any] | None, inbox_seq: int | None = None) -> None: ...


class Inbox:
    """One actor's inbox (messages seen and not taken, oldest first) and its children."""

    __slots__ = ("actor", "messages", "seen", "children")

    def __init__(self, actor: InboxOwner) -> None:
        self.actor = actor
        self.messages: list[tuple[int, dict[str, Any]]] | tuple[()] = ()
        """Seen and not taken yet, oldest first (the empty tuple when none: no empty list is
        kept while parked)."""
        self.seen = 0
        """The newest inbox seq seen: a message at or below it is not taken twice."""
        self.children: dict[str, int] | None = None
        """child id -> the seq of the op awaiting it."""

    def add(self, messages: Iterable[tuple[int, dict[str, Any]]]) -> bool:
        """Note messages not seen before; True if any was new."""
        new = False
        for seq, message in messages:
            if seq > self.seen:
                if self.messages:
                    self.messages.append((seq, message))  # type: ignore[union-attr]
                else:
                    self.messages = [(seq, message)]
                self.seen = seq
                new = True
        return new

    # -- children -------------------------------------------------------------------------

    def start_child(self, cmd: Command) -> None:
        actor = self.actor
        seq, op = cmd.seq, cmd.op
        record = cmd.record
        if record is not None and record.get("child_id") is not None:  # started before: wait
            self._children()[record["child_id"]] = seq
            return
        run, engine = actor.run, actor.engine
        child_id = op.id or child_id_for(actor.wid, actor.run_id, seq)  # type: ignore[union-attr]
        writes = actor.pending_writes()
        refused, flow = self._child_arguments_refused(op)  # type: ignore[arg-type]
        if refused is not None:  # the child would fail at once: this op fails instead
            del actor.ops[seq]
            writes.ops.append((seq, run.record_outcome(seq, err=error_record(refused), at1=engine.clock.now())))
            return
        waits = op.kind == "child"  # type: ignore[union-attr]
        existing = engine.store.get_workflow(child_id)
        if existing is not None and (existing["status"] not in TERMINAL or not waits):
            # A started child's id is never reused: that start happened, once.
            del actor.ops[seq]
            error = WorkflowAlreadyExists(f"workflow {child_id!r} already exists (status {existing['status']})", workflow_id=child_id)
            writes.ops.append((seq, run.record_outcome(seq, err=error_record(error), at1=engine.clock.now())))
            return
        # A finished workflow's id may be reused (a parent that continues as new may start
        # "the same" child every run); a running one's never.
        child_run = new_id()
        now = engine.clock.now()
        trace = None if _tracing.ACTIVE is None else _tracing.child_trace(actor)  # its spans go under the parent's run
        create = CreateWorkflow(child_id, op.name, op.args, child_run, "start_new", None, actor.wid, None, None, flow, trace)  # type: ignore[union-attr]
        started = run.record_started(seq, child_id=child_id, child_run_id=child_run, parent_close=op.parent_close, at0=now)  # type: ignore[union-attr]
        claim = op.name in engine.workflows  # type: ignore[union-attr]
        writes.fields = {"children": True}
        if waits:
            writes.ops.append((seq, started))
            writes.effects.append(CreateChild(create, actor.run_id, seq, claim))
            self._children()[child_id] = seq
            return
        # Started, not awaited: resolved by this very commit, with the child's run id. The
        # child names no parent run, so its ending reaches whichever run is current then.
        del actor.ops[seq]
        writes.ops.append((seq, run.record_outcome(seq, ok=encode(child_run), at1=now)))
        writes.effects.append(CreateChild(create, None, seq, claim))

    def close_child(self, cmd: Command) -> None:
        """Cancel or terminate a child by its id, resolved at once (the request is an effect
        of the delivery's commit)."""
        actor = self.actor
        op = cmd.op
        writes = actor.pending_writes()
        target = op.name  # type: ignore[union-attr]
        writes.effects.append(CancelOther(target) if op.how == "cancel" else TerminateOther(target, op.reason))  # type: ignore[union-attr]
        seq = cmd.seq
        del actor.ops[seq]
        writes.ops.append((seq, actor.run.record_outcome(seq, ok=_ENCODED_NONE, at1=actor.engine.clock.now())))

    def _child_arguments_refused(self, op: ChildOp) -> tuple[InvalidRequest | None, Flow | None]:
        """Arguments that do not fit the child's signature or its ``concurrency_key``, and
        its flow control, if this engine registers its type (one it does not is checked by
        the engine that runs it, when that drives it, and has no flow control)."""
        definition = self.actor.engine.workflows.get(op.name)
        if definition is None:
            return None, None
        refused = definition.parameters.refusal(count_args(op.args, "child workflow argument"))
        if refused is not None or definition.concurrency is None:
            return refused, None
        try:
            return None, flow_of(definition, decode_args(op.args))
        except InvalidRequest as exc:
            return exc, None

    def _children(self) -> dict[str, int]:
        if self.children is None:
            self.children = {}
        return self.children

    # -- the inbox ------------------------------------------------------------------------

    def consume_with_append(self, append: AppendInbox) -> AppendAndConsume | None:
        """A signal this actor could take as the very next thing it does (parked on a
        ``wait_signal`` for it, without a timer, with nothing else pending or seen) is consumed
        in the transaction that appends it: the intent for that, or None to append it plainly.
        The actor stays busy until ``consumed_with_append``: nothing else may record first."""
        actor = self.actor
        if actor.busy or actor.closed or actor.stuck or self.messages or actor.wakes or actor.timers or actor.attempts or actor.writes is not None or actor.after is not None:
            return None
        run = actor.run
        seq = run.wanted_signal(append.name)
        if seq is None or seq not in actor.ops:
            return None
        actor.busy = True
        return AppendAndConsume(append, actor.epoch, actor.run_id, seq, run.outcome_record(seq, ok=append.payload, at1=actor.engine.clock.now()))

    def consumed_with_append(self, intent: AppendAndConsume, result: Any) -> None:
        """The commit of ``consume_with_append``'s intent: resume on the signal if it was
        consumed; else (left in the inbox, or the append failed) carry on as before."""
        actor = self.actor
        actor.busy = False
        if actor.closed:
            return
        if isinstance(result, WeftError) or not result[1]:
            actor.poll()
            return
        inbox_seq = result[0]
        if inbox_seq > self.seen:
            self.seen = inbox_seq
        del actor.ops[intent.op_seq]
        actor.run.keep_outcome(intent.op_seq, intent.record)
        actor.handle(turn(actor))

    def consume(self) -> None:
        """Take the first message the run can use now, in a commit of its own."""
        actor = self.actor
        run = actor.run
        for index, (inbox_seq, message) in enumerate(self.messages):
            kind = message["kind"]
            if kind == "signal":
                name = message["name"]
                seq = run.wanted_signal(name)
                if seq is not None:
                    self._take(index)
                    actor.ops.pop(seq, None)
                    record = run.record_outcome(seq, ok=message["payload"], inbox=inbox_seq, at1=actor.engine.clock.now())
                    actor.commit(ops=((seq, record),), consume=(inbox_seq,), timers_del=actor.clear_timer(seq))
                    return
                if name in run.signal_handlers:
                    self._take(index)
                    seq, record = run.record_handler(name, message["payload"], inbox_seq, at1=actor.engine.clock.now())
                    actor.commit(ops=((seq, record),), consume=(inbox_seq,))
                    return
            elif kind == "update":
                self._take(index)
                self._apply_update(inbox_seq, message)
                return
            elif kind == "cancel":
                if not run.cancel_requested and not run.pending_seqs():
                    continue  # nothing awaited right now (cannot last): keep it for later
                self._take(index)
                self._apply_cancel(inbox_seq)
                return
            elif kind == "child-done":
                self._take(index)
                self._child_done(inbox_seq, message)
                return

    def _take(self, index: int) -> None:
        """Drop message ``index``: the commit being made consumes it."""
        messages: list[Any] = self.messages  # type: ignore[assignment]
        del messages[index]
        if not messages:
            self.messages = ()

    def _apply_update(self, inbox_seq: int, message: dict[str, Any]) -> None:
        """Validate on the owner before anything is recorded; a rejection is answered under
        the request id (so a retry gets it too) and leaves no op in the history."""
        actor = self.actor
        run, engine = actor.run, actor.engine
        request_id = message.get("request_id")
        name = message["name"]
        try:
            args = decode_args(message["payload"], "update argument")
            running(engine, run, UPDATE, name, run.validate_update, name, args)
        except Exception as exc:
            if not isinstance(exc, UpdateRejected):
                exc = UpdateRejected(f"update {name!r} rejected: {exc}", workflow_id=actor.wid, update=name)
            answer = {"err": error_record(exc)}
            effects = (PutRequest(request_id, answer),) if request_id else ()
            self._answer_after(request_id)
            actor.commit(consume=(inbox_seq,), effects=effects)
            self._reply_after(request_id, name, answer)
            return
        seq, packed, record = running(engine, run, UPDATE, name, run.record_update, name, args, message["payload"], inbox_seq, request_id, engine.payload_limit, at1=engine.clock.now())
        answer = {"ok": record["ok"]} if "err" not in record else {"err": record["err"]}
        effects = (PutRequest(request_id, answer),) if request_id else ()
        self._answer_after(request_id)
        actor.commit(ops=((seq, packed),), consume=(inbox_seq,), effects=effects)
        self._reply_after(request_id, name, answer)

    def _answer_after(self, request_id: str | None) -> None:
        if request_id is not None:
            actor = self.actor
            engine, wid = actor.engine, actor.wid
            actor.after = lambda: engine.update_answered(wid, request_id)

    def _reply_after(self, request_id: str | None, name: str, answer: dict[str, Any]) -> None:
        """Calls waiting here for this answer with a reply get it in the pass of the commit
        just submitted, which stores it (``_call_replies``)."""
        if request_id is not None:
            engine = self.actor.engine
            reply_at_answer(engine.committer, engine.waiters, self.actor.wid, request_id, name, answer)

    def _apply_cancel(self, inbox_seq: int) -> None:
        """Cancellation is delivered at the current await: every op awaited now gets a
        cancelled outcome (its work stopped), so the workflow sees ``CancelledError`` there and
        may clean up. A repeated request is consumed and changes nothing."""
        actor = self.actor
        run = actor.run
        if run.cancel_requested:
            actor.commit(consume=(inbox_seq,))
            return
        error = cancelled_record(CANCEL_REQUESTED)
        first = True
        for seq in run.pending_seqs():
            cmd = actor.ops.get(seq)
            kind = cmd.op.kind if cmd is not None else run.history.get(seq, {}).get("kind", "")  # type: ignore[union-attr]
            actor.cancel_op(seq, kind, run.history.get(seq), error, inbox_seq if first else None)
            first = False
        writes = actor.writes
        actor.writes = None
        writes.consume.append(inbox_seq)  # type: ignore[union-attr]
        actor.commit_writes(writes)  # type: ignore[arg-type]

    def _child_done(self, inbox_seq: int, message: dict[str, Any]) -> None:
        actor = self.actor
        run = actor.run
        child_id = message["name"]
        seq = self.children.pop(child_id, None) if self.children else None
        if seq is None or seq not in actor.ops:
            if CHILD_DONE_SIGNAL in run.signal_handlers:  # a start_child child: its handler
                status = unpack_record(message["payload"])["status"]
                seq, record = run.record_handler(CHILD_DONE_SIGNAL, encode((child_id, status)), inbox_seq, at1=actor.engine.clock.now())
                actor.commit(ops=((seq, record),), consume=(inbox_seq,))
                return
            actor.commit(consume=(inbox_seq,))  # nobody awaits that child any more
            return
        del actor.ops[seq]
        outcome = unpack_record(message["payload"])
        now = actor.engine.clock.now()
        if outcome["status"] == "completed":
            record = run.record_outcome(seq, ok=outcome["result"], inbox=inbox_seq, at1=now)
        else:
            record = run.record_outcome(seq, err=child_error(child_id, outcome), inbox=inbox_seq, at1=now)
        actor.commit(ops=((seq, record),), consume=(inbox_seq,))
