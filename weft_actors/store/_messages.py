"""Messages that need more than a plain inbox append: idempotent requests (updates), cancel
requests, and signal-with-start. None is fenced: any live engine commits them for any workflow.

An update's request id makes its append idempotent: the ``requests`` keyspace maps
``(wid, request id)`` to ``pending`` (with the inbox seq) from the append on, and to the answer
once the owner applied (or rejected) it. A retried request finds the entry and appends nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..codec import pack_record, unpack_record
from ..errors import WorkflowAlreadyExists, WorkflowClosed, WorkflowNotFound
from ._intents import AppendInbox, CancelOther, Created, CreateWorkflow
from ._feed import feed_entry
from ._keys import TERMINAL, fence, pack_u32, pack_u64, prefixed, run_prefix
from ._state import TxnState
from ._table import apply_intent
from ._writes import append_inbox, request_key

if TYPE_CHECKING:
    import lmdb

    from ._env import Databases

__all__ = ["AppendAndConsume", "RequestCancel", "SignalWithStart", "append_and_consume", "append_message", "request_cancel_intent", "signal_with_start", "RequestsMixin"]


class RequestCancel(NamedTuple):
    """Ask a workflow to cancel: a ``cancel`` message for a running one, an immediate close as
    ``cancelled`` for a pending (not yet started) one. ``WorkflowClosed`` if it has ended."""

    wid: str


class SignalWithStart(NamedTuple):
    """Signal workflow ``create.wid``, creating it first if there is none, in one transaction.

    A running or pending workflow is just signalled. A finished one is replaced by a new run if
    ``create.if_exists`` is ``"start_new"``; otherwise it is ``WorkflowAlreadyExists``
    (``"error"``) or ``WorkflowClosed`` (``"return"``: it exists, but cannot take the signal).
    """

    create: CreateWorkflow
    name: str
    payload: bytes


class AppendAndConsume(NamedTuple):
    """Append a signal and let its owner, parked on ``wait_signal`` for it, consume it in the
    same transaction: the inbox entry is deleted and op ``op_seq`` records ``record`` (the
    outcome the owner prepared, completed here with ``inbox``: the entry's seq). One commit
    instead of two, and the workflow's next op is committed with the signal itself.

    The append always stands; the consumption only if the owner still holds the claim at
    ``epoch`` and no older message waits in the inbox (those go first, FIFO). Returns
    ``(seq, consumed)``; when not consumed, the message waits in the inbox as usual."""

    append: AppendInbox
    epoch: int
    run_id: str
    op_seq: int
    record: dict[str, Any]


def append_and_consume(state: TxnState, intent: AppendAndConsume) -> tuple[Any, bool]:
    txn, dbs, append = state.txn, state.dbs, intent.append
    wid = append.wid
    if append.request_id is not None and txn.get(request_key(wid, append.request_id), db=dbs.requests) is not None:
        return append_message(state, append), False  # a repeat: nothing appended, nothing consumed
    holder = txn.get(wid.encode(), db=dbs.claim_holder)
    if holder is None or holder[:24] != fence(state.engine_raw, intent.epoch) or _has_inbox(txn, dbs, wid):
        return append_message(state, append), False
    # The claim is held, so the workflow runs (every end drops it): no status to check, and
    # with its inbox empty no room either. The entry would be deleted at once: none is made.
    seq = state.next_feed_seq()
    txn.put(pack_u64(seq), feed_entry(state.now, wid), db=dbs.feed)
    record = intent.record
    record["inbox"] = seq
    txn.put(run_prefix(wid, intent.run_id) + pack_u32(intent.op_seq), pack_record(record), db=dbs.ops)
    if append.request_id is not None:
        note_request(state, append, seq)
    return seq, True


def _has_inbox(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> bool:
    prefix = prefixed(wid)
    cursor = txn.cursor(db=dbs.inbox)
    return cursor.set_range(prefix) and cursor.key().startswith(prefix)


def append_message(state: TxnState, intent: AppendInbox) -> Any:
    """``AppendInbox``; with a request id, at most once per ``(wid, request id)``: a repeated
    request appends nothing and returns its entry (``{"state": "pending"|"done"|"sent", ...}``:
    an update waits for its answer, a signal is ``sent``)."""
    if intent.request_id is None:
        return append_inbox(state, intent)
    txn, dbs = state.txn, state.dbs
    key = request_key(intent.wid, intent.request_id)
    raw = txn.get(key, db=dbs.requests)
    if raw is not None:
        return unpack_record(raw)
    seq = append_inbox(state, intent)
    note_request(state, intent, seq)
    return seq


def note_request(state: TxnState, intent: AppendInbox, seq: int) -> None:
    """Record request ``intent.request_id`` as appended at inbox ``seq``: an update is
    ``pending`` until its answer is stored, a signal is ``sent`` (nothing answers it)."""
    entry = {"state": "pending" if intent.kind == "update" else "sent", "inbox": seq, "at": state.now}
    state.txn.put(request_key(intent.wid, intent.request_id), pack_record(entry), db=state.dbs.requests)  # type: ignore[arg-type]


def request_cancel_intent(state: TxnState, intent: RequestCancel) -> dict[str, Any]:
    raw = state.txn.get(intent.wid.encode(), db=state.dbs.workflows)
    if raw is None:
        raise WorkflowNotFound(f"workflow {intent.wid!r} not found", workflow_id=intent.wid)
    status = unpack_record(raw)["status"]
    if status in TERMINAL:
        raise WorkflowClosed(f"workflow {intent.wid!r} has already finished (status {status})", workflow_id=intent.wid, status=status)
    return apply_intent(state, CancelOther(intent.wid))


def signal_with_start(state: TxnState, intent: SignalWithStart) -> tuple[Created, int]:
    create = intent.create
    wid = create.wid
    raw = state.txn.get(wid.encode(), db=state.dbs.workflows)
    existing = None if raw is None else unpack_record(raw)
    if existing is None:
        created = apply_intent(state, create)
    elif existing["status"] not in TERMINAL:
        created = Created(False, existing["run_id"], existing["status"], 0)
    elif create.if_exists == "start_new":
        created = apply_intent(state, create)
    elif create.if_exists == "return":
        raise WorkflowClosed(
            f"workflow {wid!r} has finished (status {existing['status']}); it takes no more signals",
            workflow_id=wid,
            status=existing["status"],
        )
    else:
        raise WorkflowAlreadyExists(f"workflow {wid!r} already exists (status {existing['status']})", workflow_id=wid, status=existing["status"])
    seq = append_inbox(state, AppendInbox(wid, "signal", intent.name, intent.payload))
    return created, seq


class RequestsMixin:
    """Mixed into ``LmdbStore``: reading an update's entry."""

    env: lmdb.Environment
    dbs: Databases

    def get_request(self, wid: str, request_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """``(request entry, workflow record)`` read in one snapshot, so that a request still
        pending in a finished workflow really was never applied."""
        with self.env.begin() as txn:
            raw = txn.get(request_key(wid, request_id), db=self.dbs.requests)
            record = txn.get(wid.encode(), db=self.dbs.workflows)
            return (
                None if raw is None else unpack_record(raw),
                None if record is None else unpack_record(record),
            )
