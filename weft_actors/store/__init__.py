"""The store: every write a named transaction, every read a named query.

Knows nothing of asyncio or zmq. ``LmdbStore`` (a directory) is the embedded default;
``PgStore`` (a ``postgresql://`` URL, ``_pg``) lets engines on several hosts share one
database. ``open_store`` picks by location; both pass the conformance suite (``tests/store``).
"""

from ._check import Problem, check_store
from ._disk import is_read_only, is_unreachable, writes_refused
from ._engines import LOCK_WAIT_GRACE, AttestedWait, expiry_time
from ._env import SCHEMA_VERSION
from ._intents import (
    AppendInbox,
    CloseWorkflow,
    Created,
    CreateWorkflow,
    Finish,
    FireStart,
    PurgeWorkflow,
    StepCommit,
    TimerRef,
)
from ._effects import CancelOther, ContinueRun, CreateChild, PutRequest, StepResult, TerminateOther
from ._keys import STATUSES, TERMINAL, split_holder
from ._messages import AppendAndConsume, RequestCancel, SignalWithStart
from ._offers import describe_type_mismatch, offered_types, type_mismatches
from ._quarantine import QUARANTINED, LiftQuarantine, QuarantineWorkflow, describe_reason, remove_stall_note, stall_note_path, write_stall_note
from ._blame import LoopSlot, loop_slot_path, loop_turning, read_loop_slot
from ._stallnotes import StallNotes, stall_notes
from ._stuck import STUCK
from ._store import LmdbStore
from ._base import ReplayRows
from ._open import open_store, is_store_url, describe_location
from ._permits import HoldPermits, TakePermits
from ._flow import Flow, flow_group
from ._handed import clear_handed, handed_to
from ._handoff import HANDOFF_BATCH, HandoffRefused, hand_off_claims, held_claims

__all__ = [
    "ReplayRows",
    "Problem",
    "check_store",
    "SCHEMA_VERSION",
    "LOCK_WAIT_GRACE",
    "AttestedWait",
    "expiry_time",
    "is_read_only",
    "is_unreachable",
    "writes_refused",
    "STATUSES",
    "TERMINAL",
    "split_holder",
    "AppendInbox",
    "CancelOther",
    "ContinueRun",
    "CreateChild",
    "TerminateOther",
    "PutRequest",
    "AppendAndConsume",
    "RequestCancel",
    "SignalWithStart",
    "QUARANTINED",
    "STUCK",
    "LiftQuarantine",
    "QuarantineWorkflow",
    "describe_reason",
    "LoopSlot",
    "StallNotes",
    "loop_slot_path",
    "loop_turning",
    "read_loop_slot",
    "stall_notes",
    "stall_note_path",
    "remove_stall_note",
    "write_stall_note",
    "offered_types",
    "type_mismatches",
    "describe_type_mismatch",
    "StepResult",
    "CloseWorkflow",
    "Created",
    "CreateWorkflow",
    "Finish",
    "FireStart",
    "LmdbStore",
    "open_store",
    "is_store_url",
    "describe_location",
    "Flow",
    "flow_group",
    "PurgeWorkflow",
    "StepCommit",
    "TimerRef",
    "TakePermits",
    "HoldPermits",
    "HANDOFF_BATCH",
    "HandoffRefused",
    "hand_off_claims",
    "handed_to",
    "clear_handed",
    "held_claims",
]
