"""Which function applies which write intent: the one applier set both stores run.

This module is the top of the appliers: it imports each of them and fills the table they
reach each other through (``_table.APPLIER_OF``), so none of them imports another.
"""

from __future__ import annotations

from typing import Any

from ._apply import APPLIERS
from ._children import cancel_other, on_terminal_intent, parent_close_intent
from ._effects import effectful_step
from ._intents import AppendInbox, CancelOther, CloseWorkflow, FireStart, PurgeWorkflow
from ._lifecycle import close_workflow, fire_start, purge_workflow, release_slot
from ._quarantine import LiftQuarantine, QuarantineWorkflow, lift_quarantine, quarantine_workflow
from ._messages import AppendAndConsume, RequestCancel, SignalWithStart, append_and_consume, append_message, request_cancel_intent, signal_with_start
from ._permits import HoldPermits, TakePermits, hold_permits, take_permits
from ._relays import EffectfulStep, OnTerminal, ParentClose, ReleaseSlot
from ._state import TxnState
from ._table import APPLIER_OF

__all__ = ["APPLIER_OF", "apply_intent"]

APPLIER_OF.update(
    {
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
        # what one applier asks of another (``_relays``, and one effect of a step)
        EffectfulStep: effectful_step,
        OnTerminal: on_terminal_intent,
        ParentClose: parent_close_intent,
        ReleaseSlot: release_slot,
        CancelOther: cancel_other,
    }
)
# intent type -> the function that applies it (``LmdbStore.apply`` looks it up itself: hot path).


def apply_intent(state: TxnState, intent: Any) -> Any:
    """Apply one intent; it raises a ``WeftError`` (having written nothing) or returns its result."""
    return APPLIER_OF[type(intent)](state, intent)
