"""``Engine``: one engine process's worth of workflow actors on one store.

Embedded (``async with Engine(dir, app=...)``) it serves its caller directly; under the
supervisor each shard process runs one. Every write goes through the group committer, is
fenced on the workflow's claim, and is acknowledged only after its commit.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import uuid
from typing import Any, Iterable

from .._clock import Clock, SystemClock
from ..codec import decode, decode_args, encode, encode_args
from ..errors import (
    EngineDeposed,
    EngineStopped,
    FencedOut,
    InvalidRequest,
    PayloadTooLarge,
    UnknownWorkflowType,
    WeftError,
    WorkflowNotFound,
)
from ..store import TERMINAL, AppendInbox, CreateWorkflow, LmdbStore
from ..workflow import WorkflowDefinition, WorkflowRun, collect_workflows, workflow_definition
from ._activities import ActivityRunner
from ._actor import Actor
from ._committer import GroupCommitter
from ._handle import WorkflowHandle
from ._maintenance import Maintenance
from ._outcome import describe_workflow, raise_for_outcome
from ._timers import TimerService

__all__ = ["Engine"]

log = logging.getLogger("weft_actors.shard")

MAX_ID_BYTES = 256
OWNERSHIP_MODES = ("workflow-lease", "single")


def validate_timing(heartbeat: float, ttl: float) -> None:
    """``heartbeat < ttl`` and ``ttl >= 3 * heartbeat``, both positive."""
    if heartbeat <= 0 or ttl <= 0:
        raise ValueError(f"heartbeat ({heartbeat}) and ttl ({ttl}) must be positive")
    if heartbeat >= ttl or ttl < 3 * heartbeat:
        raise ValueError(f"need heartbeat < ttl and ttl >= 3 * heartbeat; got heartbeat={heartbeat}, ttl={ttl}")


class Engine:
    """Runs workflows of ``app`` (a module, or a list of ``@workflow`` functions) on the store
    at ``data_dir``. A later engine on the same directory takes over whatever this one leaves
    running, after a crash too."""

    def __init__(
        self,
        data_dir: str,
        app: Any = None,
        *,
        clock: Clock | None = None,
        heartbeat: float = 0.5,
        ttl: float = 3.0,
        ownership: str = "workflow-lease",
        engine_id: str | None = None,
        slot: int | None = None,
        max_activity_threads: int = 32,
        payload_limit: int = 1 << 20,
        sync: bool = True,
        map_size: int | None = None,
        tune_gc: bool = False,
        background: bool = True,
    ) -> None:
        validate_timing(heartbeat, ttl)
        if ownership not in OWNERSHIP_MODES:
            raise ValueError(f"ownership must be one of {OWNERSHIP_MODES}, not {ownership!r}")
        self.data_dir = data_dir
        self.workflows: dict[str, WorkflowDefinition] = collect_workflows(app)
        self.clock: Clock = clock or SystemClock()
        self.heartbeat = heartbeat
        self.ttl = ttl
        self.ownership = ownership
        self.engine_id = engine_id or uuid.uuid4().hex
        self.slot = slot
        self.payload_limit = payload_limit
        self._max_threads = max_activity_threads
        self._sync = sync
        self._map_size = map_size
        self._tune_gc = tune_gc
        self._background = background
        self.actors: dict[str, Actor] = {}
        self.orphans: set[str] = set()
        self.metrics: dict[str, int] = {
            "claims_acquired": 0,
            "claims_takeover": 0,
            "claims_lost_race": 0,
            "claims_deposed": 0,
            "heartbeat_failures": 0,
            "wakes_discarded_timer": 0,
            "wakes_discarded_message": 0,
            "workflows_completed": 0,
        }
        self.activities_started = 0
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.state = "new"
        self.store: LmdbStore
        self.committer: GroupCommitter
        self.timers: TimerService
        self.activities: ActivityRunner
        self.maintenance: Maintenance

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        kwargs = {} if self._map_size is None else {"map_size": self._map_size}
        self.store = LmdbStore(self.data_dir, clock=self.clock, sync=self._sync, **kwargs)
        try:
            self.store.register_engine(
                self.engine_id, heartbeat=self.heartbeat, ttl=self.ttl, mode=self.ownership, slot=self.slot, pid=os.getpid()
            )
        except BaseException:
            self.store.close()
            raise
        self.committer = GroupCommitter(self.store, self.engine_id, loop)
        self.timers = TimerService(loop, self.clock)
        self.activities = ActivityRunner(loop, self._max_threads)
        self.maintenance = Maintenance(self)
        self.state = "running"
        if self._tune_gc:
            gc.collect()
            gc.freeze()
            gc.set_threshold(100_000, 50, 100)
        self.maintenance.reclaim_pass()
        if self._background:
            self.maintenance.start(loop)

    async def close(self) -> None:
        """Stop: commit what is pending, stop every actor, release the claims (so a peer takes
        them at once), and fail every call still waiting with ``EngineStopped``."""
        if self.state != "running":
            return
        self.state = "stopping"
        await self.maintenance.stop()
        self.committer.flush()
        self._stop_actors()
        try:
            self.store.release_engine(self.engine_id)
        except WeftError as exc:
            log.warning("could not release claims of engine %s: %s", self.engine_id, exc)
        self._shutdown(EngineStopped("engine stopped"))

    def depose(self, reason: str) -> None:
        """This engine lost its own liveness: stop every actor without committing anything."""
        if self.state != "running":
            return
        log.error("engine %s deposed: %s", self.engine_id, reason)
        self.state = "deposed"
        self.maintenance.cancel()
        self._stop_actors()
        self._shutdown(EngineDeposed(f"engine {self.engine_id} was deposed: {reason}", engine_id=self.engine_id))

    def _stop_actors(self) -> None:
        for actor in list(self.actors.values()):
            actor.close()
        self.actors.clear()

    def _shutdown(self, error: WeftError) -> None:
        self.timers.close()
        self.activities.close()
        self.store.close()
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)
        self._waiters.clear()
        if self.state != "deposed":
            self.state = "stopped"

    def _check_running(self) -> None:
        if self.state != "running":
            raise EngineStopped(f"engine is {self.state}", engine_id=self.engine_id)

    # -- client calls ---------------------------------------------------------------------

    def _definition(self, workflow: Any) -> WorkflowDefinition:
        if isinstance(workflow, str):
            name = workflow
        else:
            definition = workflow_definition(workflow)
            if definition is None:
                raise UnknownWorkflowType(f"{workflow!r} is not a @workflow", workflow_type=repr(workflow))
            name = definition.name
        found = self.workflows.get(name)
        if found is None:
            raise UnknownWorkflowType(f"no workflow named {name!r} is registered", workflow_type=name)
        return found

    def _check_payload(self, data: bytes, what: str) -> bytes:
        if len(data) > self.payload_limit:
            raise PayloadTooLarge(f"{what} is {len(data)} bytes; the limit is {self.payload_limit}", size=len(data), limit=self.payload_limit)
        return data

    async def start(
        self,
        workflow: Any,
        *args: Any,
        id: str | None = None,
        if_exists: str = "error",
        memo: Any = None,
    ) -> WorkflowHandle:
        """Start ``workflow(*args)``; returns once the start is committed (and claimed here)."""
        self._check_running()
        definition = self._definition(workflow)
        wid = new_id() if id is None else validate_id(id)
        if if_exists not in ("error", "return", "start_new"):
            raise InvalidRequest(f"if_exists must be 'error', 'return' or 'start_new', not {if_exists!r}")
        payload = self._check_payload(encode_args(args, "workflow argument"), "workflow arguments")
        memo_bytes = None if memo is None else self._check_payload(encode(memo, "memo"), "memo")
        intent = CreateWorkflow(wid, definition.name, payload, new_id(), if_exists, memo_bytes)
        future = self.committer.loop.create_future()

        def created(result: Any) -> None:
            # Runs in the commit's resume pass: the new actor takes its first step right here.
            if not isinstance(result, WeftError) and result.created and result.status == "running":
                self.metrics["claims_acquired"] += 1
                inbox = self.store.load_inbox(wid) if if_exists == "start_new" else ()
                self._spawn(definition, wid, result.run_id, result.epoch, args, {}, inbox)
            if not future.done():
                future.set_result(result)

        self.committer.submit(intent, created)
        result = await future
        if isinstance(result, WeftError):
            raise result
        return WorkflowHandle(self, wid, result.run_id)

    def get_handle(self, workflow_id: str) -> WorkflowHandle:
        """A handle on ``workflow_id``; no I/O happens until a method is awaited."""
        return WorkflowHandle(self, workflow_id)

    async def signal(self, workflow_id: str, name: str, payload: Any = None) -> None:
        self._check_running()
        if not isinstance(name, str) or not name:
            raise InvalidRequest("a signal needs a non-empty name")
        data = self._check_payload(encode(payload, "signal payload"), "signal payload")
        seq = await self.committer.submit_and_wait(AppendInbox(workflow_id, "signal", name, data))
        if isinstance(seq, WeftError):
            raise seq
        actor = self.actors.get(workflow_id)
        if actor is not None:
            message = {"kind": "signal", "name": name, "payload": data, "request_id": None, "at": self.clock.now()}
            self.deliver_messages(actor, [(seq, message)])

    async def query(self, workflow_id: str, name: str, *args: Any) -> Any:
        self._check_running()
        actor = self.actors.get(workflow_id)
        if actor is not None and not actor.closed:
            value = actor.run.query(name, args)
        else:
            value = self._query_by_replay(workflow_id, name, args)
        return decode(encode(value, "query result"), "query result")

    def _query_by_replay(self, workflow_id: str, name: str, args: tuple[Any, ...]) -> Any:
        record, _, ops, _ = self.store.load_for_replay(workflow_id)
        if record is None:
            raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
        run = WorkflowRun(self._definition(record["type"]), workflow_id, record["run_id"], decode_args(record["args"]), ops)
        try:
            run.start()
            return run.query(name, args)
        finally:
            run.close()

    async def result(self, workflow_id: str, timeout: float | None = None) -> Any:
        loop = self.committer.loop
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            self._check_running()
            if workflow_id not in self.actors:
                record = self.store.get_workflow(workflow_id)
                if record is None:
                    raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
                if record["status"] in TERMINAL:
                    return raise_for_outcome(workflow_id, record)
            # Woken by the local finish (with the outcome), or after a poll interval: the
            # workflow may be owned by another engine, or taken over meanwhile.
            wait = self.heartbeat
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"workflow {workflow_id!r} did not finish within {timeout}s")
                wait = min(wait, remaining)
            future: asyncio.Future[Any] = loop.create_future()
            self._waiters.setdefault(workflow_id, []).append(future)
            timer = loop.call_later(wait, _resolve, future, None)
            try:
                outcome = await future
            finally:
                timer.cancel()
                waiters = self._waiters.get(workflow_id)
                if waiters is not None and future in waiters:
                    waiters.remove(future)
                    if not waiters:
                        del self._waiters[workflow_id]
            if outcome is not None:
                return raise_for_outcome(workflow_id, outcome)

    async def describe(self, workflow_id: str) -> dict[str, Any]:
        self._check_running()
        record, holder, ops, inbox = self.store.load_for_replay(workflow_id)
        if record is None:
            raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
        return describe_workflow(workflow_id, record, holder, ops, inbox, self.store.get_epoch(workflow_id))

    async def list(self, status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        self._check_running()
        if status is not None and status not in TERMINAL | {"pending", "running"}:
            raise InvalidRequest(f"unknown status {status!r}")
        return self.store.list_workflows(status, type, limit, cursor)

    def stats(self) -> dict[str, Any]:
        parked = sum(1 for actor in self.actors.values() if not actor.busy and actor.cmd is not None and actor.cmd.op.kind != "activity")  # type: ignore[union-attr]
        return {
            "engine_id": self.engine_id,
            "pid": os.getpid(),
            "state": self.state,
            "live_actors": len(self.actors),
            "parked_actors": parked,
            "claims_active": len(self.actors) + len(self.orphans),
            "commits_total": self.committer.batches,
            "writes_total": self.committer.intents,
            "timers": len(self.timers),
            "activities_started": self.activities_started,
            "feed_cursor": self.maintenance.feed_cursor,
            "feed_lag": self.maintenance.feed_lag,
            "reclaim_pass_seconds": self.maintenance.last_pass_seconds,
            **self.metrics,
        }

    # -- actors ---------------------------------------------------------------------------

    def _spawn(
        self,
        definition: WorkflowDefinition,
        wid: str,
        run_id: str,
        epoch: int,
        args: tuple[Any, ...],
        history: dict[int, dict[str, Any]],
        inbox: Iterable[tuple[int, dict[str, Any]]],
    ) -> Actor:
        run = WorkflowRun(definition, wid, run_id, args, history)
        actor = Actor(self, wid, run_id, epoch, run)
        actor.add_messages(list(inbox))
        self.actors[wid] = actor
        actor.handle(run.start())
        actor.poll()
        return actor

    def drive(self, wid: str, epoch: int) -> bool:
        """Replay and resume ``wid``, which this engine holds at ``epoch``."""
        record, holder, ops, inbox = self.store.load_for_replay(wid)
        if record is None or record["status"] != "running":
            return False
        if holder is None or holder[:16].hex() != self.engine_id or int.from_bytes(holder[16:24], "big") != epoch:
            return False
        self._spawn(self._definition(record["type"]), wid, record["run_id"], epoch, decode_args(record["args"]), ops, inbox)
        return True

    def deliver_messages(self, actor: Actor, messages: list[tuple[int, dict[str, Any]]]) -> None:
        if not self.wake_guard(actor, "message"):
            return
        if actor.add_messages(messages):
            actor.poll()

    def wake_guard(self, actor: Actor, kind: str) -> bool:
        """Before a wake resumes an actor, confirm this engine still holds it at its epoch.
        If the read itself fails, proceed: the fenced write is the backstop."""
        try:
            holder = self.store.get_holder_bytes(actor.wid)
        except Exception:
            return True
        if holder is not None and holder[:16].hex() == self.engine_id and int.from_bytes(holder[16:24], "big") == actor.epoch:
            return True
        self.metrics["wakes_discarded_" + kind] = self.metrics.get("wakes_discarded_" + kind, 0) + 1
        self.drop_actor(actor, deposed=True)
        return False

    def drop_actor(self, actor: Actor, *, deposed: bool = False) -> None:
        actor.close()
        if self.actors.get(actor.wid) is actor:
            del self.actors[actor.wid]
        if deposed:
            self.metrics["claims_deposed"] += 1

    def commit_failed(self, actor: Actor, error: WeftError) -> None:
        if isinstance(error, FencedOut):
            log.info("workflow %s: %s", actor.wid, error)
            self.drop_actor(actor, deposed=True)
        elif isinstance(error, EngineDeposed):
            self.depose(str(error))
        else:
            log.error("workflow %s: commit failed (%s); it will be driven again", actor.wid, error)
            self.drop_actor(actor)
            self.orphans.add(actor.wid)

    def actor_finished(self, actor: Actor) -> None:
        actor.closed = True
        if self.actors.get(actor.wid) is actor:
            del self.actors[actor.wid]
        self.metrics["workflows_completed"] += 1
        waiters = self._waiters.pop(actor.wid, None)
        if waiters:
            outcome = actor.outcome_record()
            for future in waiters:
                _resolve(future, outcome)

    def tick(self) -> None:
        """Fire due timers and run one maintenance pass now (for tests on a fake clock)."""
        self.timers.poke()
        self.maintenance.run_pass()


def new_id() -> str:
    return os.urandom(16).hex()


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def validate_id(wid: Any) -> str:
    if not isinstance(wid, str) or not wid:
        raise InvalidRequest(f"a workflow id must be a non-empty string, not {wid!r}")
    if "\x00" in wid:
        raise InvalidRequest("a workflow id must not contain NUL")
    if len(wid.encode()) > MAX_ID_BYTES:
        raise InvalidRequest(f"a workflow id is at most {MAX_ID_BYTES} bytes", limit=MAX_ID_BYTES)
    return wid
