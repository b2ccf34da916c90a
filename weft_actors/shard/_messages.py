"""Client calls that send a workflow more than a signal, and what the engine does after an
owner's step touched other workflows or continued as new.

Mixed into ``Engine``. Every request is a durable inbox message first (an update under its
request id, a cancel request, a signal created together with its workflow), committed by
whichever engine got the call; the owner, wherever it runs, applies it by its feed poll, and a
local owner at once. A caller waiting for an update's answer is woken by a local owner right
after its commit, and otherwise reads the store once per heartbeat, as ``result()`` does.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any, Callable

from ..codec import decode, decode_args, encode, encode_args
from ..errors import InvalidRequest, PayloadTooLarge, UpdateFailed, UpdateRejected, WeftError, WorkflowClosed, WorkflowNotFound
from ..store import TERMINAL, AppendInbox, CreateWorkflow, RequestCancel, SignalWithStart, StepResult
from ._flow import flow_of
from ._handle import WorkflowHandle
from ._hosting import resolve
from ._validate import check_instant, check_seconds, new_id, validate_id, validate_name

_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)

if TYPE_CHECKING:
    from .._clock import Clock
    from ..store import LmdbStore
    from ..workflow import WorkflowDefinition
    from ._actor import Actor
    from ._committer import GroupCommitter
    from ._driving import Driver
    from ._eviction import Evictor
    from ._metrics import EngineMetrics

__all__ = ["WorkflowMessages"]


class WorkflowMessages:
    heartbeat: float
    clock: Clock
    store: LmdbStore
    committer: GroupCommitter
    metrics: EngineMetrics
    actors: dict[str, Actor]
    workflows: dict[str, WorkflowDefinition]
    eviction: Evictor
    driver: Driver
    _waiters: dict[str, list[asyncio.Future[Any]]]
    _update_waiters: dict[tuple[str, str], list[asyncio.Future[Any]]]
    _on_commit_hint: Callable[[str, str], None] | None

    # provided by Engine / ActorHost
    def add_waiter(self, wid: str, future: asyncio.Future[Any]) -> None:  # provided by ActorHost
        raise NotImplementedError

    def remove_waiter(self, wid: str, future: asyncio.Future[Any]) -> None:  # provided by ActorHost
        raise NotImplementedError

    def _check_running(self) -> None:
        raise NotImplementedError

    def _check_payload(self, data: bytes, what: str) -> bytes:
        raise NotImplementedError

    def _definition(self, workflow: Any) -> WorkflowDefinition:
        raise NotImplementedError

    def admit(self) -> None:
        raise NotImplementedError

    def _spawn(self, definition: WorkflowDefinition, wid: str, run_id: str, epoch: int, args: tuple[Any, ...], history: dict[int, dict[str, Any]], inbox: Any) -> Actor:
        raise NotImplementedError

    def spawn_started(self, definition: WorkflowDefinition, wid: str, run_id: str, epoch: int, args: tuple[Any, ...], with_inbox: bool = False) -> None:
        raise NotImplementedError

    def deliver_messages(self, actor: Actor, messages: list[tuple[int, dict[str, Any]]]) -> None:
        raise NotImplementedError

    def publish_hint(self, kind: str, wid: str) -> None:
        raise NotImplementedError

    def closed_externally(self, workflow_id: str, result: dict[str, Any]) -> None:
        raise NotImplementedError

    def after_committed_call(self, follow_up: Callable[..., None], *args: Any) -> None:
        raise NotImplementedError

    # -- updates --------------------------------------------------------------------------

    async def update(self, workflow_id: str, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Apply update ``name(*args)`` in the workflow and return the handler's result.

        Idempotent per ``request_id`` (one is made if not given): a retry with the same id gets
        the same answer and the handler runs once. ``UpdateRejected`` if the validator refused
        it (or there is no such handler), ``UpdateFailed`` if the handler raised,
        ``WorkflowClosed`` if the workflow finished before applying it.
        """
        self._check_running()
        validate_id(workflow_id)
        validate_name(name, "an update")
        if request_id is None:
            request_id = uuid.uuid4().hex
        else:
            validate_id(request_id, "a request id")
        payload = self._check_payload(encode_args(args, "update argument"), "update arguments")
        appended = await self.committer.submit_and_wait(AppendInbox(workflow_id, "update", name, payload, request_id))
        if isinstance(appended, WeftError):
            raise appended
        if isinstance(appended, int):  # a new request, not a retry of a known one
            self.committer.after_replies(self.after_committed_call, self._message_sent, workflow_id, "update")
        return await self._await_update(workflow_id, name, request_id)

    async def _await_update(self, wid: str, name: str, request_id: str) -> Any:
        loop = self.committer.loop
        key = (wid, request_id)
        while True:
            self._check_running()
            entry, record = self.store.get_request(wid, request_id)
            if entry is not None and entry["state"] == "done":
                return _answer(wid, name, entry)
            if record is None or entry is None:
                raise WorkflowNotFound(f"workflow {wid!r} (update {request_id!r}) not found", workflow_id=wid)
            if record["status"] in TERMINAL:
                raise WorkflowClosed(
                    f"workflow {wid!r} finished (status {record['status']}) before update {name!r} was applied",
                    workflow_id=wid,
                    status=record["status"],
                )
            future: asyncio.Future[Any] = loop.create_future()
            self._update_waiters.setdefault(key, []).append(future)
            self.add_waiter(wid, future)  # also woken by a finish, a drop, a stop
            timer = loop.call_later(self.heartbeat, resolve, future, None)
            try:
                await future
            finally:
                timer.cancel()
                _forget(self._update_waiters, key, future)
                self.remove_waiter(wid, future)

    def update_answered(self, wid: str, request_id: str) -> None:
        """This engine, the owner, committed the answer to ``request_id``: wake whoever waits
        for it here, and hint the engines that may wait for it elsewhere."""
        for future in self._update_waiters.get((wid, request_id), ()):
            resolve(future, None)
        if self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", wid)

    def update_hinted(self, wid: str) -> None:
        """A hint about ``wid``: callers waiting here for its updates look at the store now
        instead of at their next poll."""
        for (hinted, _), futures in list(self._update_waiters.items()):
            if hinted == wid:
                for future in futures:
                    resolve(future, None)

    # -- cancel ---------------------------------------------------------------------------

    async def cancel(self, workflow_id: str) -> None:
        """Request cancellation: the workflow gets ``asyncio.CancelledError`` at its current
        await (its running activity is cancelled), may clean up, and ends ``cancelled`` unless
        it returns normally. A workflow that has not started yet is closed ``cancelled`` at once.
        ``WorkflowClosed`` if it has already finished."""
        self._check_running()
        validate_id(workflow_id)
        result = await self.committer.submit_and_wait(RequestCancel(workflow_id))
        if isinstance(result, WeftError):
            raise result
        if "closed" in result:
            self.after_committed_call(self.closed_externally, workflow_id, result["closed"])
            return
        self.committer.after_replies(self.after_committed_call, self._message_sent, workflow_id, "cancel")

    # -- signal with start ----------------------------------------------------------------

    async def signal_with_start(
        self,
        workflow: Any,
        *args: Any,
        signal: str,
        payload: Any = None,
        id: str | None = None,
        if_exists: str = "error",
        memo: Any = None,
        start_delay: float | None = None,
        start_at: float | None = None,
        execution_timeout: float | None = None,
        priority: int | None = None,
    ) -> WorkflowHandle:
        """Signal workflow ``id``, starting ``workflow(*args)`` under that id first if it does not
        exist, in one transaction. A running (or pending) workflow is just signalled; a finished
        one is replaced if ``if_exists="start_new"``, else ``WorkflowAlreadyExists``
        (``"error"``) or ``WorkflowClosed`` (``"return"``)."""
        self._check_running()
        validate_name(signal, "a signal")
        definition = self._definition(workflow)
        self.admit()  # refused like a start at the actor cap, even if it only signals
        create = self._create_intent(definition, args, id, if_exists, memo, start_delay, start_at, execution_timeout, priority)
        data = self._check_payload(encode(payload, "signal payload"), "signal payload")
        future = self.committer.loop.create_future()
        wid = create.wid

        def committed(result: Any) -> None:
            # In the commit's answer pass, as for start: a new run takes its first step, or the
            # signalled one goes on, once the reply has left.
            if not isinstance(result, WeftError):
                created = result[0]
                if created.created and created.status == "running":
                    self.metrics.claim("acquired")
                    self.committer.after_replies(self.spawn_started, definition, wid, created.run_id, created.epoch, args, True)
                elif not created.created:
                    self.committer.after_replies(self.after_committed_call, self._message_sent, wid, "signal")
            resolve(future, result)

        self.committer.submit_answer(SignalWithStart(create, signal, data), committed)
        result = await future
        if isinstance(result, WeftError):
            raise result
        return WorkflowHandle(self, wid, result[0].run_id)  # type: ignore[arg-type]

    def _create_intent(
        self,
        definition: WorkflowDefinition,
        args: tuple[Any, ...],
        id: str | None = None,
        if_exists: str = "error",
        memo: Any = None,
        start_delay: float | None = None,
        start_at: float | None = None,
        execution_timeout: float | None = None,
        priority: int | None = None,
    ) -> CreateWorkflow:
        """The create intent of a start, every part checked first (``InvalidRequest``,
        ``PayloadTooLarge``), so that a refused start writes nothing: arguments that do not
        fit the workflow's signature too, which the run would otherwise meet only once driven."""
        wid = new_id() if id is None else validate_id(id)
        if if_exists not in ("error", "return", "start_new"):
            raise InvalidRequest(f"if_exists must be 'error', 'return' or 'start_new', not {if_exists!r}")
        if start_delay is not None and start_at is not None:
            raise InvalidRequest("give start_delay or start_at, not both")
        if execution_timeout is not None:
            execution_timeout = check_seconds(execution_timeout, "execution_timeout")
        if start_delay is not None:
            start_at = self.clock.now() + check_seconds(start_delay, "start_delay")
        elif start_at is not None:
            start_at = check_instant(start_at, "start_at")
        data = self._check_payload(encode_args(args, "workflow argument"), "workflow arguments")
        memo_bytes = None if memo is None else self._check_payload(encode(memo, "memo"), "memo")
        refused = definition.parameters.refusal(len(args))
        if refused is not None:
            raise refused
        flow = flow_of(definition, args, priority)
        return _new_tuple(CreateWorkflow, (wid, definition.name, data, new_id(), if_exists, memo_bytes, None, start_at, execution_timeout, flow))

    # -- after an owner's step ------------------------------------------------------------

    def _message_sent(self, wid: str, kind: str) -> None:
        """After an inbox append committed: a local owner takes it at once, a remote one by
        its feed poll (sooner with the hint). The local owner reads the whole inbox: a message
        another engine appended just before must not be skipped."""
        if self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", wid)
        actor = self.actors.get(wid)
        if actor is not None:
            self.deliver_messages(actor, self.store.load_inbox(wid))
        elif wid in self.eviction.evicted:
            self.eviction.revive(wid, kind)  # its replay reads the inbox, this message included

    def after_step(self, actor: Actor, result: StepResult) -> None:
        """An owner's step created children here (drive them at once) or changed other
        workflows (a parent's inbox, a child closed or asked to cancel): wake those."""
        for wid, wf_type, args, created in result.created:
            definition = self.workflows.get(wf_type)
            if created.epoch and definition is not None:
                self.metrics.claim("acquired")
                self._spawn(definition, wid, created.run_id, created.epoch, decode_args(args), {}, self.store.load_inbox(wid))
        for wid in result.touched:
            self.wake(wid)

    def wake(self, wid: str) -> None:
        """Something changed for ``wid`` in the store: a local actor re-reads its inbox (the
        wake guard drops it if it was closed); a remote owner hears a hint."""
        if not self.look_at(wid) and self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", wid)

    def look_at(self, wid: str) -> bool:
        """If ``wid`` is this engine's (live, evicted or queued for the driver), hand its
        actor the inbox now (or drive it); False if it is not held here."""
        actor = self.actors.get(wid)
        if actor is not None:
            self.deliver_messages(actor, self.store.load_inbox(wid))
            return True
        if wid in self.eviction.evicted:
            self.eviction.revive(wid, "signal")
            return True
        return self.driver.drive_now(wid)  # held here, queued for its replay: now

    def continue_run(self, actor: Actor, epoch: int) -> None:
        """The run continued as new (committed, claim kept at ``epoch``): drive the next run
        here, with the whole inbox, which carried over."""
        actor.closed = True
        if self.actors.get(actor.wid) is actor:
            del self.actors[actor.wid]
        run_id, payload = actor.next_run  # type: ignore[misc]
        definition = self._definition(actor.run.workflow_type)
        actor.run.discard()
        self._spawn(definition, actor.wid, run_id, epoch, decode_args(payload), {}, self.store.load_inbox(actor.wid))


def _answer(wid: str, name: str, entry: dict[str, Any]) -> Any:
    if "ok" in entry:
        return decode(entry["ok"], "update result") if entry["ok"] is not None else None
    error = entry.get("err") or {}
    if error.get("code") == "update_rejected":
        raise UpdateRejected(error.get("message", f"update {name!r} rejected"), workflow_id=wid, update=name)
    if error.get("code") == "payload_too_large":  # its result was refused, not its handler
        raise PayloadTooLarge(error.get("message", f"result of update {name!r} is too large"), workflow_id=wid, update=name)
    raise UpdateFailed(
        f"update {name!r} of workflow {wid!r} failed: {error.get('type')}: {error.get('message')}",
        workflow_id=wid,
        update=name,
        type=error.get("type"),
        cause_message=error.get("message"),
        traceback=error.get("traceback", ""),
    )


def _forget(table: dict[Any, list[asyncio.Future[Any]]], key: Any, future: asyncio.Future[Any]) -> None:
    futures = table.get(key)
    if futures is not None and future in futures:
        futures.remove(future)
        if not futures:
            del table[key]
