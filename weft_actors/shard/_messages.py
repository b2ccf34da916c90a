"""Client calls that send a workflow a message or close it: ``signal``, ``update``,
``cancel``, ``terminate``, ``lift_quarantine`` and ``purge``.

The engine holds one ``WorkflowMessages`` and delegates to it; it knows the engine's runtime
only by ``MessageHost``. Every request is a durable inbox message first (a signal, an update
under its request id, a cancel request), committed by whichever engine got the call; the
owner, wherever it runs, applies it by its feed poll, and a local owner at once. A caller
waiting for an update's answer is woken by a local owner right after its commit, and
otherwise reads the store once per heartbeat, as ``result()`` does. A close commits here and
is followed up locally (``ActorHost.closed_externally``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from ..codec import decode, encode, encode_args
from ..errors import InvalidRequest, PayloadTooLarge, UpdateFailed, UpdateRejected, WeftError, WorkflowClosed, WorkflowNotFound
from ..store import TERMINAL, AppendInbox, CloseWorkflow, LiftQuarantine, PurgeWorkflow, RequestCancel
from ._validate import check_payload, validate_id, validate_name
from ._call_replies import call_reply, reply_at_close
from ._outcome import update_outcome
from ._waiters import resolve

if TYPE_CHECKING:
    from ..store import LmdbStore
    from ._actor import Actor
    from ._committer import GroupCommitter
    from ._waiters import Waiters

__all__ = ["MessageHost", "WorkflowMessages"]

log = logging.getLogger("weft_actors.shard")


class _Evicted(Protocol):
    @property
    def evicted(self) -> Mapping[str, object]: ...

    def revive(self, wid: str, kind: str) -> object: ...


class _Hinted(Protocol):
    def hint(self) -> None: ...


class MessageHost(Protocol):
    """What messages need of the engine: its state check, the store, the committer, the
    heartbeat (an update's poll), the payload limit, the waiters, the live and evicted actors
    (a signal a parked actor takes at once), the maintenance pass (a lifted quarantine is
    taken over at once), and the follow-ups of a committed call."""

    @property
    def store(self) -> LmdbStore: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def heartbeat(self) -> float: ...

    @property
    def payload_limit(self) -> int: ...

    @property
    def waiters(self) -> Waiters: ...

    @property
    def actors(self) -> Mapping[str, Actor]: ...

    @property
    def eviction(self) -> _Evicted: ...

    @property
    def maintenance(self) -> _Hinted: ...

    def check_running(self) -> None: ...

    def after_committed_call(self, follow_up: Callable[..., None], *args: Any) -> None: ...

    def message_sent(self, wid: str, kind: str) -> None: ...

    def closed_externally(self, workflow_id: str, result: dict[str, Any]) -> None: ...

    def publish_hint(self, kind: str, wid: str) -> None: ...


class WorkflowMessages:
    """The message and close calls of one engine (its facade delegates)."""

    __slots__ = ("_host",)

    def __init__(self, host: MessageHost) -> None:
        self._host = host

    async def signal(self, workflow_id: str, name: str, payload: Any = None, *, request_id: str | None = None) -> None:
        """Append a signal to the durable inbox (and the feed); returns once committed. The
        owner, wherever it runs, picks it up by its feed poll; a local owner at once. With a
        ``request_id``, a repeat of it (a client's resend after a failover) appends nothing."""
        host = self._host
        append = self._signal_append(workflow_id, name, payload, request_id)
        actor = host.actors.get(workflow_id)
        direct = actor.consume_with_append(append) if actor is not None else None
        if direct is None:
            result = await host.committer.submit_and_wait(append)
        else:
            future = host.committer.loop.create_future()

            def committed(result: Any) -> None:
                host.committer.after_replies(actor.consumed_with_append, direct, result)  # type: ignore[union-attr]
                resolve(future, result)

            host.committer.submit_answer(direct, committed)
            result = await future
        if isinstance(result, WeftError):
            raise result
        if direct is None or not result[1]:
            host.committer.after_replies(host.after_committed_call, host.message_sent, workflow_id, "signal")

    def _signal_append(self, workflow_id: str, name: str, payload: Any, request_id: str | None) -> AppendInbox:
        """A signal's checks (raised, nothing submitted) and its inbox append; an evicted owner
        here is revived first (parked again at once, it may take the signal directly)."""
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        validate_name(name, "a signal")
        if request_id is not None:
            validate_id(request_id, "a request id")
        data = check_payload(encode(payload, "signal payload"), "signal payload", host.payload_limit)
        if workflow_id in host.eviction.evicted:
            host.eviction.revive(workflow_id, "signal")
        return AppendInbox(workflow_id, "signal", name, data, request_id)

    def submit_signal(self, workflow_id: str, name: str, payload: Any, request_id: str | None, done: Callable[[Any], None]) -> None:
        """``signal`` without a coroutine, for a server's request served by callbacks: the same
        checks (raised here, nothing submitted) and intent; ``done(result)`` is called in the
        commit's pass, and the follow-ups run once the replies of that pass have left."""
        host = self._host
        append = self._signal_append(workflow_id, name, payload, request_id)
        actor = host.actors.get(workflow_id)
        direct = actor.consume_with_append(append) if actor is not None else None
        committer = host.committer

        def committed(result: Any) -> None:
            if direct is not None:
                committer.after_replies(actor.consumed_with_append, direct, result)  # type: ignore[union-attr]
            if not isinstance(result, WeftError) and (direct is None or not result[1]):
                committer.after_replies(host.after_committed_call, host.message_sent, workflow_id, "signal")
            done(result)

        committer.submit_answer(append if direct is None else direct, committed)

    # -- updates --------------------------------------------------------------------------

    async def update(self, workflow_id: str, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Apply update ``name(*args)`` in the workflow and return the handler's result.

        Idempotent per ``request_id`` (one is made if not given): a retry with the same id gets
        the same answer and the handler runs once. ``UpdateRejected`` if the validator refused
        it (or there is no such handler), ``UpdateFailed`` if the handler raised,
        ``WorkflowClosed`` if the workflow finished before applying it.
        """
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        validate_name(name, "an update")
        if request_id is None:
            request_id = uuid.uuid4().hex
        else:
            validate_id(request_id, "a request id")
        payload = check_payload(encode_args(args, "update argument"), "update arguments", host.payload_limit)
        appended = await host.committer.submit_and_wait(AppendInbox(workflow_id, "update", name, payload, request_id))
        if isinstance(appended, WeftError):
            raise appended
        if isinstance(appended, int):  # a new request, not a retry of a known one
            host.committer.after_replies(host.after_committed_call, host.message_sent, workflow_id, "update")
        return await self._await_update(workflow_id, name, request_id)

    async def _await_update(self, wid: str, name: str, request_id: str) -> Any:
        host = self._host
        loop = host.committer.loop
        key = (wid, request_id)
        while True:
            host.check_running()
            entry, record = host.store.get_request(wid, request_id)
            if entry is not None and entry["state"] == "done":
                return update_outcome(wid, name, entry)
            if record is None or entry is None:
                raise WorkflowNotFound(f"workflow {wid!r} (update {request_id!r}) not found", workflow_id=wid)
            if record["status"] in TERMINAL:
                raise WorkflowClosed(
                    f"workflow {wid!r} finished (status {record['status']}) before update {name!r} was applied",
                    workflow_id=wid,
                    status=record["status"],
                )
            future: asyncio.Future[Any] = loop.create_future()
            waiters = host.waiters
            waiters.add_update(key, future)
            waiters.add(wid, future)  # also woken by a finish, a drop, a stop
            # A server's call hands over its reply, given in the pass of the answering commit.
            reply = call_reply.get() if wid in host.actors else None
            if reply is not None:
                waiters.add_reply(waiters.answers, key, reply)
            timer = loop.call_later(host.heartbeat, resolve, future, None)
            try:
                await future
            finally:
                timer.cancel()
                waiters.remove_update(key, future)
                waiters.remove(wid, future)
                if reply is not None:
                    waiters.remove_reply(waiters.answers, key, reply)

    # -- cancel ---------------------------------------------------------------------------

    async def cancel(self, workflow_id: str) -> None:
        """Request cancellation: the workflow gets ``asyncio.CancelledError`` at its current
        await (its running activity is cancelled), may clean up, and ends ``cancelled`` unless
        it returns normally. A workflow that has not started yet is closed ``cancelled`` at once.
        ``WorkflowClosed`` if it has already finished."""
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        result = await self._close_and_wait(RequestCancel(workflow_id), workflow_id, lambda result: result.get("closed"))
        if isinstance(result, WeftError):
            raise result
        if "closed" in result:
            host.after_committed_call(host.closed_externally, workflow_id, result["closed"])
            return
        host.committer.after_replies(host.after_committed_call, host.message_sent, workflow_id, "cancel")

    async def terminate(self, workflow_id: str, reason: str | None = None) -> None:
        """End a workflow at once, whoever owns it: one transaction sets it ``terminated``,
        drops its claim and timers and rotates its epoch, so its owner's next write is fenced
        out. ``WorkflowClosed`` if it has already finished."""
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        if reason is not None and not isinstance(reason, str):
            raise InvalidRequest(f"a terminate reason must be a string, not {reason!r}")
        error = {"type": "WorkflowTerminated", "message": reason or "terminated", "kind": "terminated"}
        result = await self._close_and_wait(CloseWorkflow(workflow_id, "terminated", error), workflow_id, lambda result: result)
        if isinstance(result, WeftError):
            raise result
        host.after_committed_call(host.closed_externally, workflow_id, result)

    def _close_and_wait(self, intent: Any, wid: str, closed: Callable[[dict[str, Any]], dict[str, Any] | None]) -> asyncio.Future[Any]:
        """Submit ``intent``, which may close ``wid`` (``closed(result)``: what it closed, or
        None): the calls waiting here for its end with a reply get it in the commit's pass."""
        host = self._host
        future = host.committer.loop.create_future()
        waiters = host.waiters

        def done(result: Any) -> None:
            if waiters.endings and not isinstance(result, WeftError):
                ending = closed(result)
                if ending is not None:
                    reply_at_close(waiters, wid, {"status": ending["status"], "result": None, "error": ending.get("error")})
            resolve(future, result)

        host.committer.submit_answer(intent, done)
        return future

    async def lift_quarantine(self, workflow_id: str, reason: str | None = None, by: str | None = None) -> None:
        """Put a quarantined workflow back to work (after a fix is deployed): ``running`` with no
        owner and its lost-owner count reset, taken over at a live engine's next reclaim pass
        (this one's at once); under flow control, ``pending`` at the head of its queue. Raises
        ``InvalidRequest`` if it is not quarantined (``WorkflowClosed`` if it has finished).
        ``by`` and ``reason`` stay in its record (``describe``'s ``quarantine_lifts``)."""
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        for name, value in (("reason", reason), ("by", by)):
            if value is not None and not isinstance(value, str):
                raise InvalidRequest(f"a lift's {name} must be a string, not {value!r}")
        result = await host.committer.submit_and_wait(LiftQuarantine(workflow_id, by or "engine", reason))
        if isinstance(result, WeftError):
            raise result
        log.warning("workflow %s: quarantine lifted (it had lost %s owners); it is %s again", workflow_id, result["lost"].get("count"), result["status"])
        host.maintenance.hint()
        host.publish_hint("workflow-touched", workflow_id)

    async def purge(self, workflow_id: str) -> None:
        """Delete a finished workflow's record, history, inbox and listing entry; its epoch is
        kept (and grows), so the id can be reused safely."""
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        result = await host.committer.submit_and_wait(PurgeWorkflow(workflow_id))
        if isinstance(result, WeftError):
            raise result
