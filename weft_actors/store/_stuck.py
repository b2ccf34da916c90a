"""Stuck workflows: a run whose replay diverges from its history (``NonDeterminismError``
after a code change) is parked with status ``stuck`` and the divergence in its record.

The owner that finds the divergence commits it with its step (``step_commit`` moves the
status and its index entries when the step's fields change it) and keeps its claim, so the
workflow is listed, counted and exported as ``stuck`` and nothing else drives it. What clears
it is code that replays: the next owner (after a restart or deploy of the shards) takes it
over like a running workflow, and the takeover transaction makes it ``running`` again
(``resume_stuck``); if the replay diverges again, that owner parks it as ``stuck`` once more.
Nothing is paid for a workflow that never diverges.
"""

from __future__ import annotations

from typing import Any, Final

from ..codec import pack_record
from ._state import TxnState
from ._writes import set_visibility

__all__ = ["STUCK", "DRIVEN", "resume_stuck"]

STUCK: Final = "stuck"
DRIVEN: Final = frozenset({"running", STUCK})
"""Statuses a takeover or reclaim pass picks up: a stuck workflow is retried by its next owner."""


def resume_stuck(state: TxnState, wid: str, record: dict[str, Any]) -> None:
    """In the transaction that takes ``wid`` over: a ``stuck`` record goes back to
    ``running`` (its divergence message dropped), for the new owner to replay."""
    old = dict(record)
    record["status"] = "running"
    record.pop("nondeterminism", None)
    record["updated"] = state.now
    state.txn.put(wid.encode(), pack_record(record), db=state.dbs.workflows)
    set_visibility(state, record, wid, old)
