"""What a group commit's transaction will read, named ahead so its first round trip fetches it.

On PostgreSQL every read is a statement; the rows a batch's transaction code reads are fetched
with the lock, one statement per keyspace (``_env.send_prefetch``). Each row named costs the
server an index probe and the engine a row to decode, so only what the appliers read is named:
a plain step (no ending, no fields, no effects: most of a workflow's commits) reads only its
workflow's holder, its fence (``_apply.step_commit``); every other intent may read the
workflow's record, holder and epoch. A row read that was not named still costs one statement
of its own, never a wrong answer.
"""

from __future__ import annotations

from typing import Any, Final

from .._intents import StepCommit
from .._keys import COUNT_PREFIX, engine_key
from .._reads import Prefetch
from .._refusals import REFUSED_KEY
from ._overlay import MAX_KEY

__all__ = ["batch_reads"]

_META_KEYS: Final = [b"feed_seq", REFUSED_KEY]


def batch_reads(dbs: Any, engine_id: str, intents: list[Any]) -> Prefetch:
    """The engine's record (its liveness check), each intent's workflow rows as above, the feed
    sequence and the workflow counts."""
    holders: dict[bytes, None] = {}
    records: dict[bytes, None] = {}
    epochs: dict[bytes, None] = {}
    for intent in intents:
        wid = getattr(intent, "wid", None)
        if not isinstance(wid, str) or not wid:
            continue
        key = wid.encode()
        if len(key) > MAX_KEY:
            continue
        holders[key] = None
        if type(intent) is StepCommit and not intent.effects:
            if intent.finish is not None or intent.fields:
                records[key] = None
            continue
        records[key] = None
        epochs[key] = None
    prefetch = Prefetch()
    prefetch.keys[dbs.engines] = [engine_key(engine_id)]
    for db, keys in ((dbs.workflows, records), (dbs.claim_holder, holders), (dbs.claim_epoch, epochs)):
        if keys:
            prefetch.keys[db] = list(keys)
    prefetch.keys[dbs.meta] = _META_KEYS
    prefetch.ranges.append((dbs.meta, COUNT_PREFIX, COUNT_PREFIX[:-1] + bytes((COUNT_PREFIX[-1] + 1,))))
    return prefetch
