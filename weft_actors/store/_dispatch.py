"""Which function applies which write intent."""

from __future__ import annotations

from typing import Any

from ._apply import APPLIERS, TxnState
from ._intents import AppendInbox, CloseWorkflow, FireStart, PurgeWorkflow
from ._lifecycle import close_workflow, fire_start, purge_workflow
from ._quarantine import LiftQuarantine, QuarantineWorkflow, lift_quarantine, quarantine_workflow
from ._messages import AppendAndConsume, RequestCancel, SignalWithStart, append_and_consume, append_message, request_cancel_intent, signal_with_start
from ._permits import HoldPermits, TakePermits, hold_permits, take_permits

__all__ = ["APPLIER_OF", "apply_intent"]

APPLIER_OF: dict[type, Any] = {
    **APPLIERS,
    CloseWorkflow: close_workflow,
    PurgeWorkflow: purge_workflow,
    FireStart: fire_start,
    AppendInbox: append_message,
    AppendAndConsume: append_and_consume,
    RequestCancel: request_cancel_intent,
    SignalWithStart: signal_with_start,
    QuarantineWorkflow: quarantine_workflow,
    LiftQuarantine: lift_quarantine,
    TakePermits: take_permits,
    HoldPermits: hold_permits,
}
"""intent type -> the function that applies it (``LmdbStore.apply`` looks it up itself: hot path)."""


def apply_intent(state: TxnState, intent: Any) -> Any:
    """Apply one intent; it raises a ``WeftError`` (having written nothing) or returns its result."""
    return APPLIER_OF[type(intent)](state, intent)
