"""Answering reads about workflows: queries, results, ``describe`` and ``list``.

The engine holds one ``WorkflowReads`` and delegates to it; it knows the engine's runtime only
by ``ReadHost``. Reads never take a claim: a workflow this engine does not drive is read from
the store (a query replays it read-only), and ``result`` waits for a local finish or polls the
store once per heartbeat, so it works wherever the workflow runs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from .._isotime import with_iso
from ..codec import decode, decode_args, encode
from ..errors import InvalidRequest, WeftError, PayloadTooLarge, WorkflowClosed, WorkflowNotFound
from ..store import STUCK, TERMINAL
from ..workflow import WorkflowRun
from ._call_replies import call_reply
from ._waiters import resolve
from ._validate import validate_id, validate_name
from ._describe import describe_workflow
from ._describe_bounds import bound_described
from ._live_view import add_live_parts, stack_with_timers
from ._outcome import raise_for_outcome
from ._on_loop import QUERY, running, start

if TYPE_CHECKING:
    from ..workflow import WorkflowDefinition
    from ..store import LmdbStore
    from ._activities import ActivityRunner
    from ._actor import Actor
    from ._committer import GroupCommitter
    from ._waiters import Waiters

__all__ = ["ReadHost", "WorkflowReads"]

log = logging.getLogger("weft_actors.shard")


class ReadHost(Protocol):
    """What reads need of the engine: its state check, the store, the loop (through the
    committer), the live actors (a local run answers a query), the registered types (a replay
    for a query), the payload limit, the loop slot (through the activities), the waiters a
    local finish wakes, and the heartbeat (how often ``result`` reads the store)."""

    @property
    def heartbeat(self) -> float: ...

    @property
    def store(self) -> LmdbStore: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def actors(self) -> Mapping[str, Actor]: ...

    @property
    def payload_limit(self) -> int: ...

    @property
    def activities(self) -> ActivityRunner: ...

    @property
    def waiters(self) -> Waiters: ...

    def check_running(self) -> None: ...

    def definition(self, workflow: Any) -> WorkflowDefinition: ...


class WorkflowReads:
    """Queries, results, ``describe`` and ``list`` of one engine (its facade delegates)."""

    __slots__ = ("_host",)

    def __init__(self, host: ReadHost) -> None:
        self._host = host

    async def query(self, workflow_id: str, name: str, *args: Any) -> Any:
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        validate_name(name, "a query")
        actor = host.actors.get(workflow_id)
        while actor is not None and actor.ahead is not None:
            # Its run went ahead of a commit in flight: answer from committed state only, as
            # that commit lands and before the run goes ahead again (a run that always goes
            # ahead would otherwise starve the query).
            future: asyncio.Future[Any] = host.committer.loop.create_future()
            actor.ahead.append(_answer_when_committed(actor, future, name, args, host.payload_limit))
            answered = await future
            if answered is not None:
                return answered[0]
            host.check_running()
            actor = host.actors.get(workflow_id)
        if actor is not None and not actor.closed:
            if actor.stuck:  # its run stopped where replay diverged: its state is not the workflow's
                raise _diverged(workflow_id, STUCK, _divergence(actor.run))
            value = running(host, actor.run, QUERY, name, actor.run.query, name, args)
        else:
            value = self._query_by_replay(workflow_id, name, args)
        return _answer_of(value, host.payload_limit)

    def _query_by_replay(self, workflow_id: str, name: str, args: tuple[Any, ...]) -> Any:
        host = self._host
        record, _, ops, _ = host.store.load_for_replay(workflow_id)
        if record is None:
            raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
        if record["status"] == "quarantined":  # its code may be what blocks: never replay it here
            raise InvalidRequest(
                f"workflow {workflow_id!r} is quarantined (its owners kept being lost while running it); "
                "lift the quarantine to query it",
                workflow_id=workflow_id,
                status=record["status"],
            )
        if record["status"] == STUCK:
            raise _diverged(workflow_id, STUCK, record.get("nondeterminism"))
        if record.get("history_pruned"):  # replaying no history would answer from the start state
            raise WorkflowClosed(
                f"workflow {workflow_id!r} finished ({record['status']}) and its history was pruned "
                "after the retention period; it can no longer be queried",
                workflow_id=workflow_id,
                status=record["status"],
            )
        run = WorkflowRun(host.definition(record["type"]), workflow_id, record["run_id"], decode_args(record["args"]), ops)
        try:
            start(host, run)
            if _divergence(run) is not None:  # this code does not replay it
                raise _diverged(workflow_id, record["status"], _divergence(run))
            return running(host, run, QUERY, name, run.query, name, args)
        finally:
            run.close()

    async def result(self, workflow_id: str, timeout: float | None = None) -> Any:
        host = self._host
        loop = host.committer.loop
        validate_id(workflow_id)
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            host.check_running()
            wait: float | None
            if workflow_id in host.actors:
                # Its actor here (or the one that takes over from it here) wakes us when the
                # run ends, and ``wake_waiters`` when it is dropped: no timer of our own.
                wait = None
            else:
                record = host.store.get_workflow(workflow_id)
                if record is None:
                    raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
                if record["status"] in TERMINAL:
                    return raise_for_outcome(workflow_id, record)
                # Woken by a done hint, by a local actor that takes it over, or after a poll
                # interval: the workflow may be owned by another engine.
                wait = host.heartbeat
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"workflow {workflow_id!r} did not finish within {timeout}s")
                wait = remaining if wait is None else min(wait, remaining)
            future: asyncio.Future[Any] = loop.create_future()
            waiters = host.waiters
            waiters.add(workflow_id, future)
            # A server's call hands over its reply, given in the pass of the ending commit.
            reply = call_reply.get() if workflow_id in host.actors else None
            if reply is not None:
                waiters.add_reply(waiters.endings, workflow_id, reply)
            timer = None if wait is None else loop.call_later(wait, resolve, future, None)
            try:
                outcome = await future
            finally:
                if timer is not None:
                    timer.cancel()
                waiters.remove(workflow_id, future)
                if reply is not None:
                    waiters.remove_reply(waiters.endings, workflow_id, reply)
            if outcome is not None:
                if reply is not None and reply.sent:
                    return None  # its server sent the outcome from the ending's pass
                return raise_for_outcome(workflow_id, outcome)

    async def describe(self, workflow_id: str, *, input_encoded: bool = False) -> dict[str, Any]:
        """The workflow's record, history, timers and inbox as people read them
        (``_describe``); ``input_encoded`` keeps its input as codec bytes (for a reply)."""
        host = self._host
        host.check_running()
        validate_id(workflow_id)
        snapshot = host.store.load_for_describe(workflow_id)
        if snapshot is None:
            raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
        described = describe_workflow(workflow_id, snapshot, input_encoded)
        add_live_parts(described, host.actors.get(workflow_id), snapshot.ops)
        if described["stack"] is None and described["status"] == "running":  # not live here: evicted, or held elsewhere
            described["stack"] = self._stack_by_replay(workflow_id, snapshot.timers)
        return bound_described(described)

    def _stack_by_replay(self, workflow_id: str, timers: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Where a running workflow that no live actor here runs waits, from a read-only replay
        of its history (a query's), with its durable timers; None if this process cannot
        replay it (its type not registered, its history pruned, or the replay diverges)."""
        host = self._host
        record, _, ops, _ = host.store.load_for_replay(workflow_id)
        if record is None or record["status"] != "running" or record.get("history_pruned"):
            return None
        try:
            run = WorkflowRun(host.definition(record["type"]), workflow_id, record["run_id"], decode_args(record["args"]), ops)
        except WeftError:  # its type, or a type in its input, is not registered here
            return None
        try:
            start(host, run)
            if _divergence(run) is not None or run.outcome is not None:
                return None
            return stack_with_timers(run, {timer["seq"]: (timer["kind"], timer["fire_at"]) for timer in timers if timer["seq"] is not None})
        except Exception:
            log.exception("workflow %s: its stack could not be read by replay", workflow_id)
            return None
        finally:
            run.close()

    async def list(
        self, status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None, memo: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One page, ``{"items": [{"id", "type", "status", "updated", "updated_iso"}...],
        "cursor": next or None}``, in workflow-id order. Following the cursors never lists a workflow twice, and
        lists every workflow that matches throughout, even one whose status changes meanwhile
        (the exact guarantee: ``store._listing.list_workflows``). ``memo`` keeps the workflows whose
        memo has each of its top-level fields, read from the memo index (``store._memo``)."""
        host = self._host
        host.check_running()
        if status is not None and status not in TERMINAL | {"pending", "running", "quarantined", STUCK}:
            raise InvalidRequest(f"unknown status {status!r}")
        page = host.store.list_workflows(status, type, limit, cursor, memo)
        page["items"] = [with_iso(item, "updated") for item in page["items"]]
        return page


def _divergence(run: WorkflowRun) -> str | None:
    """Where ``run``'s replay diverged from its history, or None if it did not."""
    outcome = run.outcome
    if outcome is None or outcome.kind != "stuck":
        return None
    return str((outcome.error or {}).get("message"))


def _diverged(workflow_id: str, status: str, divergence: Any) -> InvalidRequest:
    """The refusal of a query whose run cannot be replayed with the code deployed: a run
    stopped where its replay diverged holds part of the workflow's state, and an answer read
    from it would be wrong without saying so."""
    where = f" ({divergence})" if divergence else ""
    return InvalidRequest(
        f"workflow {workflow_id!r} cannot be queried: its replay diverges from its history{where}; "
        "deploy code that replays it (see replay ID --app)",
        workflow_id=workflow_id,
        status=status,
    )


def _answer_of(value: Any, limit: int) -> Any:
    """A query's answer as its caller gets it (encoded and decoded: a copy, never the run's
    own object); ``PayloadTooLarge`` over ``limit`` bytes."""
    data = encode(value, "query result")
    if len(data) > limit:
        raise PayloadTooLarge(f"query answer is {len(data)} bytes; the limit is {limit}", size=len(data), limit=limit)
    return decode(data, "query result")


def _answer_when_committed(actor: Actor, future: asyncio.Future[Any], name: str, args: tuple[Any, ...], limit: int) -> Callable[[bool], None]:
    """What an actor ahead of its commit calls when that commit is decided: with True it
    answers the query from the run as it stands (committed state, the run not gone on yet) as
    ``(value,)``; with False ``future`` gets None (look again). Never raises into the commit's
    callback: the query's own error goes to its caller."""

    def answer(committed: bool) -> None:
        if future.done():
            return
        if not committed:
            future.set_result(None)
            return
        try:
            value = _answer_of(running(actor.engine, actor.run, QUERY, name, actor.run.query, name, args), limit)
        except BaseException as exc:  # the caller's error, raised where it awaits
            future.set_exception(exc)
        else:
            future.set_result((value,))

    return answer
