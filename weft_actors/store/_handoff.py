"""The fenced handoff of an engine's claims to a named successor (a graceful drain).

A release (``release_claims``) leaves a workflow with no holder, for whichever live engine's
reclaim pass takes it; a handoff instead names the new owner in the same transaction that
takes the claim away, so the successor drives the workflow on a hint, without waiting for a
reclaim pass, and no other engine can race it. Each workflow moves only if its holder is
still exactly ``(this engine, the epoch it holds)``, and it moves at ``epoch + 1`` from the
never-reset ``claim_epoch``: any write the old owner has not committed yet for it carries the
old epoch and is fenced out by the step's own check (``step_commit``).

The transaction also checks that the handing engine is still live (a deposed engine commits
nothing, a handoff included) and that the successor is live and runs the types handed to it;
a successor that is gone or runs other types refuses the whole handoff (``HandoffRefused``)
and the caller releases as at a plain stop. Run on LMDB and on PostgreSQL alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..codec import unpack_record
from . import _engines
from ._handed import handed_key
from ._keys import by_engine_key, engine_key, holder_value, pack_u64, unpack_u64
from ._offers import offered_types
from ._reads import Prefetch, warm
from ._state import TxnState
from ._stuck import DRIVEN
from ._writes import next_epoch

if TYPE_CHECKING:
    from ._base import KeyspaceStore

__all__ = ["HANDOFF_BATCH", "HandoffRefused", "held_claims", "hand_off_claims", "SKIP_FENCE"]

HANDOFF_BATCH: Final = 500
"""Claims one handoff transaction moves at most: a large engine hands off in many short
transactions, so commits of other engines go on between them."""

SKIP_FENCE: list[bool] = [False]
"""A failpoint for the simulation's test only (``tests/sim``): True moves a claim without the
fence (this engine still holds it at the epoch it read, and the workflow is still driven), so
a handoff whose read went stale writes over what another engine committed meanwhile. Never
set outside a test."""


class HandoffRefused(Exception):
    """The successor cannot take the handoff (not registered, not live, or it does not run a
    handed workflow's type): the handing engine releases its claims instead. Never reaches a
    caller: the handoff falls back to a release."""


def held_claims(store: KeyspaceStore, engine_id: str, after: bytes = b"", limit: int = HANDOFF_BATCH) -> list[tuple[str, int]]:
    """``(wid, epoch)`` of the first ``limit`` claims that ``engine_id`` holds (its ``by_engine``
    entries whose holder names it), past the workflow id ``after``: one read snapshot."""
    me = engine_key(engine_id)
    found: list[tuple[str, int]] = []
    with store.env.begin() as txn:
        cursor = txn.cursor(db=store.dbs.by_engine)
        if not cursor.set_range(me + after + (b"\x00" if after else b"")):
            return found
        keys: list[bytes] = []
        for key in cursor.iternext(values=False):
            if not bytes(key).startswith(me) or len(keys) >= limit:
                break
            keys.append(bytes(key))
        warm(txn, store.dbs.claim_holder, [key[16:] for key in keys])  # one statement on PostgreSQL
        for key in keys:
            holder = txn.get(key[16:], db=store.dbs.claim_holder)
            if holder is not None and bytes(holder[:16]) == me:
                found.append((key[16:].decode(), unpack_u64(bytes(holder[16:24]))[0]))
    return found


def _reads(dbs: Any, me: bytes, successor: bytes, wids: list[bytes]) -> Prefetch:
    reads = Prefetch()
    reads.keys[dbs.engines] = [me, successor]
    for db in (dbs.claim_holder, dbs.claim_epoch, dbs.workflows):
        reads.keys[db] = wids
    return reads


def hand_off_claims(
    store: KeyspaceStore, engine_id: str, successor: str, claims: list[tuple[str, int]], every_engine_runs: frozenset[str] = frozenset()
) -> dict[str, int | None]:
    """Move each ``(wid, epoch)`` of ``claims`` from ``engine_id`` to ``successor`` in one write
    transaction; ``wid -> the successor's epoch``, or None for a claim this engine no longer
    holds at that epoch (taken over, closed or finished meanwhile: left as it is).

    ``EngineDeposed`` if this engine is no longer live; ``HandoffRefused`` if the successor is
    not live or does not run a handed workflow's type (nothing written either way). Types in
    ``every_engine_runs`` (the built-in ones, which no record lists) pass that check."""
    ownership = store._ownership
    me, succ = engine_key(engine_id), engine_key(successor)
    started = store.clock.lease_now()  # its own lease, judged as in ``apply``
    failed_at = store._refusals.failed_at

    def txn_fn(txn: Any) -> dict[str, int | None]:
        _engines.check_live(txn, store.dbs, engine_id, started, ownership.incarnations.get(engine_id), failed_at)
        record = _engines.engine_record(txn, store.dbs, succ)
        if successor == engine_id or record is None or not _engines.is_live(record, store.clock.lease_now(), failed_at):
            raise HandoffRefused(f"successor engine {successor} is not live")
        runs = offered_types(record)
        now = store.clock.now()
        state = TxnState(txn, store.dbs, succ, now)
        moved: dict[str, int | None] = {}
        for wid, epoch in claims:
            wid_raw = wid.encode()
            holder = txn.get(wid_raw, None, store.dbs.claim_holder)
            raw = txn.get(wid_raw, None, store.dbs.workflows)
            workflow = None if raw is None else unpack_record(raw)
            if workflow is None or (not SKIP_FENCE[0] and (holder is None or bytes(holder[:24]) != me + pack_u64(epoch) or workflow["status"] not in DRIVEN)):
                moved[wid] = None  # no longer this engine's at that epoch (or not driven): not its to hand
                continue
            if runs is not None and workflow["type"] not in runs and workflow["type"] not in every_engine_runs:
                raise HandoffRefused(f"successor engine {successor} does not run workflow type {workflow['type']!r}")
            new_epoch = next_epoch(state, wid_raw)
            txn.put(wid_raw, holder_value(succ, new_epoch, now), True, True, False, store.dbs.claim_holder)
            txn.delete(by_engine_key(me, wid), b"", store.dbs.by_engine)
            if holder is not None and bytes(holder[:16]) != me:  # only with the fence removed
                txn.delete(by_engine_key(bytes(holder[:16]), wid), b"", store.dbs.by_engine)
            txn.put(by_engine_key(succ, wid), b"", True, True, False, store.dbs.by_engine)
            txn.put(handed_key(succ, wid), b"", True, True, False, store.dbs.meta)  # the durable wake (``_handed``)
            moved[wid] = new_epoch
        return moved

    return store._write(txn_fn, _reads(store.dbs, me, succ, [wid.encode() for wid, _ in claims]))
