"""Write intents: what an engine asks the store to commit.

An intent is plain data. ``Store.apply`` applies a batch of them in one transaction, each
with its own checks, and commits once; each intent gets its own result or error. Every
intent validates before it writes, so a rejected intent leaves nothing behind.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "Flow",
    "AppendInbox",
    "CloseWorkflow",
    "CreateWorkflow",
    "FireStart",
    "PurgeWorkflow",
    "Finish",
    "StepCommit",
    "TimerRef",
    "Created",
    "CreateChild",
    "PutRequest",
    "CancelOther",
    "TerminateOther",
    "ContinueRun",
    "StepResult",
]


class Flow(NamedTuple):
    """A start's flow control, as the starting engine computed it from the definition
    (``_flow`` keeps its slots and queue)."""

    group: bytes
    concurrency: int
    priority: int = 0


class TimerRef(NamedTuple):
    fire_at: float
    seq: int
    kind: str


class Finish(NamedTuple):
    """A terminal transition of the owner's run."""

    status: str
    result: bytes | None = None
    error: dict[str, Any] | None = None


class CreateWorkflow(NamedTuple):
    """Create a workflow and, unless it is a delayed start, claim it for the committing engine.

    ``if_exists``: ``"error"`` raises ``WorkflowAlreadyExists``; ``"return"`` answers with the
    existing run; ``"start_new"`` replaces a finished workflow with a new run (epoch + 1),
    dropping what the old run left in its inbox and its update requests, and raises for one
    still running.
    """

    wid: str
    wf_type: str
    args: bytes
    run_id: str
    if_exists: str = "error"
    memo: bytes | None = None
    parent: str | None = None
    start_at: float | None = None
    execution_timeout: float | None = None
    flow: Flow | None = None
    """Flow control (``_flow``): the group's slot is taken here, or the start is queued."""
    trace: str | None = None
    """The W3C ``traceparent`` the start carried (``_tracing``), kept in the record."""


class Created(NamedTuple):
    """Result of ``CreateWorkflow``: ``epoch`` is 0 when nothing was claimed."""

    created: bool
    run_id: str
    status: str
    epoch: int


class StepCommit(NamedTuple):
    """The owner's progress on one run, fenced on ``(engine, epoch)``.

    ``ops`` are ``(seq, packed op record)``; ``consume`` the inbox sequence numbers the
    recorded ops consumed (deleted in this same transaction: exactly-once delivery);
    ``finish`` ends the run and releases the claim; ``fields`` merges into the workflow record;
    ``effects`` are writes beyond the run's own log that must commit with it (``_effects``).
    """

    wid: str
    epoch: int
    run_id: str
    ops: tuple[tuple[int, bytes], ...] = ()
    consume: tuple[int, ...] = ()
    timers_put: tuple[TimerRef, ...] = ()
    timers_del: tuple[TimerRef, ...] = ()
    finish: Finish | None = None
    fields: dict[str, Any] | None = None
    effects: tuple[Any, ...] = ()


class AppendInbox(NamedTuple):
    """A message for a workflow's durable inbox, with its change-feed entry. Not fenced."""

    wid: str
    kind: str
    name: str
    payload: bytes
    request_id: str | None = None


class CloseWorkflow(NamedTuple):
    """An external terminal transition (terminate, execution timeout, cancel of a parked run),
    committed by any live engine, owner or not. Not fenced: it *moves* the fence instead, by
    rotating the epoch in the same transaction, so the running owner's next write fails.

    Raises ``WorkflowClosed`` if the workflow already ended; ``run_id``, when given, must
    still be the current run (a deadline of an older run never closes a newer one).
    """

    wid: str
    status: str
    error: dict[str, Any] | None = None
    run_id: str | None = None


class PurgeWorkflow(NamedTuple):
    """Delete a finished workflow: record, op logs, inbox, timers, visibility. The epoch stays
    (and grows by one), so an owner of any earlier generation of the id stays fenced out."""

    wid: str


class FireStart(NamedTuple):
    """``pending`` -> ``running`` of a delayed start whose time has come, claiming it for the
    committing engine in the same transaction. Loses (``None``) if another engine fired it."""

    wid: str
    run_id: str


# The effects a ``StepCommit`` may carry, applied by ``_effects`` in the step's transaction.


class CreateChild(NamedTuple):
    """Create child ``create.wid`` of the committing run (op ``parent_seq``). ``claim``: the
    committing engine can run the child's type and takes it at once; otherwise the child is
    left unclaimed, for any engine that can run it to reclaim. ``parent_run`` None: a child
    nobody waits for (``start_child``), whose ending is told to the parent's current run."""

    create: CreateWorkflow
    parent_run: str | None
    parent_seq: int
    claim: bool


class PutRequest(NamedTuple):
    """Store the answer to request ``request_id`` of the committing workflow (``{"ok": bytes}``
    or ``{"err": error record}``): a retried update with that id gets it without re-running.
    Kept, with the run that answered it, until the run after that one continues as new (or
    the workflow is replaced by ``start_new``, purged or pruned)."""

    request_id: str
    result: dict[str, Any]


class CancelOther(NamedTuple):
    """Ask workflow ``wid`` to cancel (see ``request_cancel``); nothing if it already ended."""

    wid: str


class TerminateOther(NamedTuple):
    """Close workflow ``wid`` as ``terminated`` (``reason`` its message) in this commit, as an
    operator's terminate would; nothing if it already ended."""

    wid: str
    reason: str


class ContinueRun(NamedTuple):
    """End the committing run as ``continued`` and start run ``run_id`` with ``args`` under the
    same workflow id: fresh op log, same inbox, claim kept by this engine at a new epoch."""

    run_id: str
    args: bytes


class StepResult(NamedTuple):
    """What a step with effects (or with relatives) did beyond its own run: the new epoch after
    continue-as-new, children created and claimed here ``(wid, type, args, Created)``, and other
    workflows whose inbox or state changed (to wake if they run on this engine)."""

    epoch: int | None = None
    created: tuple[tuple[str, str, bytes, Created], ...] = ()
    touched: tuple[str, ...] = ()
