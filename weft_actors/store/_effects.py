"""Effects: writes beyond a run's own op log that must commit atomically with an owner's step.

A ``StepCommit`` may carry ``effects``: starting a child (in the same transaction as the
parent's op record of it), storing an update's result under its request id (with the op that
applied the handler), asking another workflow to cancel (a losing or abandoned child), and
continuing as new (the run's terminal step creates the next run). Only a child start can be
refused; it is checked before anything of the step is written, so a refused step writes nothing.
"""

from __future__ import annotations

from typing import cast

from ..codec import pack_record, unpack_record
from ..errors import FencedOut, WorkflowAlreadyExists, WorkflowNotFound
from ._intents import CancelOther, CloseWorkflow, ContinueRun, CreateChild, Created, PutRequest, StepCommit, StepResult, TerminateOther
from ._keys import DEADLINE_SEQ, NO_ENGINE, TERMINAL, by_engine_key, holder_value, inbox_key, prefixed, run_prefix, timer_key
from ._relays import EffectfulStep, ParentClose
from ._state import TxnState
from ._table import apply_intent
from ._writes import next_epoch, request_key, set_visibility

__all__ = [
    "CreateChild",
    "TerminateOther",
    "PutRequest",
    "CancelOther",
    "ContinueRun",
    "StepResult",
    "step_with_effects",
    "effectful_step",
    "MAX_PREVIOUS_RUNS",
]

MAX_PREVIOUS_RUNS = 20
"""How many earlier runs a continued workflow's record remembers (ids and endings only)."""

# The effect records live with the other intents (``_intents``); they are named here too,
# where the package's door (``weft_actors.store``) imports them from.


def effectful_step(state: TxnState, intent: EffectfulStep) -> StepResult:
    """The applier of ``EffectfulStep`` (``step_commit`` hands it on once the fence holds)."""
    return step_with_effects(state, intent.step)


def step_with_effects(state: TxnState, intent: StepCommit) -> StepResult:
    """Called by ``step_commit`` once the fence is checked. Checks every effect that can be
    refused, then writes: the children, the step itself, the rest."""
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    for effect in intent.effects:
        if type(effect) is CreateChild:
            child = effect.create.wid
            raw = txn.get(child.encode(), db=dbs.workflows)
            if raw is not None and unpack_record(raw)["status"] not in TERMINAL:
                raise WorkflowAlreadyExists(f"workflow {child!r} already exists", workflow_id=child)
        elif type(effect) is ContinueRun:
            raw = txn.get(wid.encode(), db=dbs.workflows)
            if raw is None:
                raise WorkflowNotFound(f"workflow {wid!r} not found", workflow_id=wid)
            if unpack_record(raw)["run_id"] != intent.run_id:
                raise FencedOut(f"workflow {wid!r} moved to another run", workflow_id=wid, epoch=intent.epoch)
    created: list[tuple[str, str, bytes, Created]] = []
    for effect in intent.effects:
        if type(effect) is CreateChild:
            created.append(_create_child(state, wid, effect))
    plain = apply_intent(state, intent._replace(effects=()))  # the step's own writes
    touched = list(plain.touched) if plain is not None else []
    epoch = None
    for effect in intent.effects:
        kind = type(effect)
        if kind is PutRequest:
            value = {"state": "done", **effect.result, "at": state.now, "run": intent.run_id}
            txn.put(request_key(wid, effect.request_id), pack_record(value), db=dbs.requests)
        elif kind is CancelOther:
            if apply_intent(state, effect) is not None:  # CancelOther: ``_children``
                touched.append(effect.wid)
        elif kind is TerminateOther:
            touched.extend(_terminate_other(state, effect))
        elif kind is ContinueRun:
            epoch = _continue_run(state, intent, effect, touched)
    return StepResult(epoch, tuple(created), tuple(touched))


def _terminate_other(state: TxnState, effect: TerminateOther) -> list[str]:
    raw = state.txn.get(effect.wid.encode(), db=state.dbs.workflows)
    if raw is None or unpack_record(raw)["status"] in TERMINAL:
        return []
    error = {"type": "WorkflowTerminated", "message": effect.reason, "kind": "terminated"}
    result = apply_intent(state, CloseWorkflow(effect.wid, "terminated", error))
    return [effect.wid, *result.get("touched", ())]


def _create_child(state: TxnState, parent: str, effect: CreateChild) -> tuple[str, str, bytes, Created]:
    txn, dbs = state.txn, state.dbs
    create = effect.create
    result: Created = apply_intent(state, create)
    wid_raw = create.wid.encode()
    record = unpack_record(cast(bytes, txn.get(wid_raw, db=dbs.workflows)))
    record["parent_run"] = effect.parent_run
    record["parent_seq"] = effect.parent_seq
    txn.put(wid_raw, pack_record(record), db=dbs.workflows)
    if not effect.claim and result.epoch:
        txn.delete(wid_raw, db=dbs.claim_holder)
        txn.delete(by_engine_key(state.engine_raw, create.wid), db=dbs.by_engine)
        txn.put(NO_ENGINE + wid_raw, b"", db=dbs.by_engine)
        result = Created(result.created, result.run_id, result.status, 0)
    return create.wid, create.wf_type, create.args, result


def _continue_run(state: TxnState, intent: StepCommit, effect: ContinueRun, touched: list[str]) -> int:
    """Turn the workflow record into the next run's. The old run's op log goes (it is done and
    its children are settled here), which is what bounds history for endless workflows."""
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    wid_raw = wid.encode()
    record = unpack_record(cast(bytes, txn.get(wid_raw, db=dbs.workflows)))
    old = dict(record)
    old_run = record["run_id"]
    had_children = record.pop("children", None)
    previous = list(record.get("previous_runs") or ())[-(MAX_PREVIOUS_RUNS - 1) :]
    previous.append({"run_id": old_run, "status": "continued", "ended": state.now})
    record.update(run_id=effect.run_id, args=effect.args, status="running", updated=state.now, result=None, error=None)
    record["previous_runs"] = previous
    if record.get("deadline") is not None:  # the execution timeout spans the whole chain of runs
        txn.put(timer_key(record["deadline"], wid, DEADLINE_SEQ), pack_record({"kind": "deadline", "run_id": effect.run_id}), db=dbs.timers)
    epoch = next_epoch(state, wid_raw)
    txn.put(wid_raw, holder_value(state.engine_raw, epoch, state.now), db=dbs.claim_holder)
    txn.put(wid_raw, pack_record(record), db=dbs.workflows)
    set_visibility(state, record, wid, old)
    if had_children:
        touched.extend(apply_intent(state, ParentClose(wid, record, old_run)))
    prefix = run_prefix(wid, old_run)
    cursor = txn.cursor(db=dbs.ops)
    if cursor.set_range(prefix):
        while cursor.key().startswith(prefix):
            if not cursor.delete() or not cursor.key():
                break
    _prune_requests(state, wid, old_run)
    return epoch


def _prune_requests(state: TxnState, wid: str, ending_run: str) -> None:
    """Bound the request entries of a chain of runs: those of runs before ``ending_run`` go,
    so a workflow that continues as new keeps two runs' worth, however many requests it took.
    The ending run's stay for the next run's lifetime (a caller may not have read its answer
    yet, and a retry with its request id still gets it, or is dropped as a repeat); pending
    updates stay with their messages, which carry over, and so does a signal's entry while its
    message still waits in the inbox. An entry stored without its run (a signal's, which is
    written without reading the workflow, or an answer of an older version) is taken to be
    the ending run's."""
    txn, dbs = state.txn, state.dbs
    prefix = prefixed(wid)
    cursor = txn.cursor(db=dbs.requests)
    if not cursor.set_range(prefix):
        return
    while cursor.key().startswith(prefix):
        entry = unpack_record(cursor.value())
        kind = entry.get("state")
        if kind == "done" or kind == "sent":
            run = entry.get("run")
            if run is None:
                entry["run"] = ending_run
                cursor.put(cursor.key(), pack_record(entry))
            elif run != ending_run and (kind == "done" or txn.get(inbox_key(wid, entry["inbox"]), db=dbs.inbox) is None):
                if not cursor.delete() or not cursor.key():
                    break
                continue
        if not cursor.next():
            break
