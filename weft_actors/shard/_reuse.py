"""Outcomes of activity attempts whose commit was refused, kept to be used instead of running
those attempts again.

A refused step (``StorageFull``, ``StorageError``) drops its actor, and the next drive replays
the run from the store: it would run again every attempt whose outcome the refused commit
carried (or that had ended and waited for that commit), once per refusal, without limit while
the store keeps flipping between room and full. So, on that failure path only, the engine keeps
those outcomes in memory, by workflow, run, op seq and attempt number, as the actor had them:
a result as recorded, a failure with the decision made then (retry when, or give up). The next
drive of the same run builds a ``ReusingActor``, whose attempt takes the kept outcome as if it
had ended inline instead of calling the activity; within one process an attempt whose outcome
was refused runs once.

Bounded (``MAX_KEPT`` outcomes, ``MAX_KEPT_BYTES`` of results): past that the oldest
workflows' outcomes are dropped (counted, logged) and those attempts run again, as they do
after a restart or a takeover, which keep nothing: activities stay at-least-once. Dropped too
when the workflow ends here, is closed elsewhere or its claim moves.

The hot path pays nothing: capture happens on a refusal, and a spawn looks here only while
something is kept.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..codec import decode, encode
from ._activities import DecidedFailure, Finished
from ._actor import _DONE, Actor
from ._attempts import Attempts

if TYPE_CHECKING:
    from ..store import LmdbStore
    from ._metrics import EngineMetrics

__all__ = ["RefusedOutcomes", "ReusingActor", "MAX_KEPT", "MAX_KEPT_BYTES"]

log = logging.getLogger("weft_actors.shard")

MAX_KEPT: Final = 10_000
"""Outcomes kept at most, over all workflows; the oldest workflows' go first."""
MAX_KEPT_BYTES: Final = 64 << 20
"""Encoded results kept at most, over all workflows."""

_Key = tuple[int, int]  # (op seq, attempt number)


class ReusingAttempts(Attempts):
    """The attempts of a run that has kept outcomes: an attempt that has one takes it (as an
    attempt that ended inline) instead of calling the activity."""

    __slots__ = ()

    def run(self, cmd: Any, attempt: int) -> Finished | None:
        actor = self.actor
        kept = actor.engine.refused.take(actor.wid, actor.run_id, cmd.seq, attempt)  # type: ignore[attr-defined]
        if kept is not None:
            return kept
        return Attempts.run(self, cmd, attempt)


class ReusingActor(Actor):
    """An actor whose run has kept outcomes: its attempts part is a ``ReusingAttempts``."""

    __slots__ = ()

    new_attempts = ReusingAttempts


class KeepHost(Protocol):
    """What keeping outcomes needs of the engine: the store (to tell committed records from
    not) and the counters of outcomes reused and dropped."""

    @property
    def store(self) -> LmdbStore: ...

    @property
    def metrics(self) -> EngineMetrics: ...


class RefusedOutcomes:
    """wid -> (run id, {(seq, attempt): (outcome, size)}), oldest workflow first."""

    __slots__ = ("_engine", "kept", "_count", "_bytes")

    def __init__(self, engine: KeepHost) -> None:
        self._engine = engine
        self.kept: dict[str, tuple[str, dict[_Key, tuple[Finished, int]]]] = {}
        self._count = 0
        self._bytes = 0

    def capture(self, actor: Actor) -> None:
        """Keep the outcomes ``actor`` holds that are not committed: the attempt outcome its
        refused commit carried (told apart from committed records by the store's op log) and
        those still waiting in its wakes. Called before the actor is dropped."""
        history = actor.run.history
        found: dict[_Key, tuple[Finished, int]] = {}
        for wake in actor.wakes:
            if wake[0] == _DONE:
                seq = wake[1]
                attempt = (history.get(seq) or {}).get("attempts", 0) + 1
                found[(seq, attempt)] = (Finished(wake[2], wake[3]), _size(wake[2]) if wake[3] is None else 0)
        if history:
            try:
                record, _holder, committed, _inbox = self._engine.store.load_for_replay(actor.wid)
            except Exception:  # cannot tell committed from not: keep only the wakes
                record, committed = None, {}
            if record is not None and record["run_id"] == actor.run_id:
                for seq, rec in history.items():
                    kept = _uncommitted(rec, committed.get(seq))
                    if kept is not None:
                        found[(seq, rec["attempts"])] = kept
        if found:
            self._add(actor.wid, actor.run_id, found)

    def keeps(self, wid: str, run_id: str) -> bool:
        """Whether outcomes of ``wid``'s run ``run_id`` are kept (another run's are dropped)."""
        kept = self.kept.get(wid)
        if kept is None:
            return False
        if kept[0] != run_id:
            self.forget(wid)
            return False
        return True

    def take(self, wid: str, run_id: str, seq: int, attempt: int) -> Finished | None:
        kept = self.kept.get(wid)
        if kept is None or kept[0] != run_id:
            return None
        entry = kept[1].pop((seq, attempt), None)
        if entry is None:
            return None
        self._count -= 1
        self._bytes -= entry[1]
        if not kept[1]:
            del self.kept[wid]
        self._engine.metrics.outcomes_reused += 1
        log.info("workflow %s: op #%d attempt %d takes the outcome its refused commit carried; not run again", wid, seq, attempt)
        return entry[0]

    def forget(self, wid: str) -> None:
        kept = self.kept.pop(wid, None)
        if kept is not None:
            self._count -= len(kept[1])
            self._bytes -= sum(size for _, size in kept[1].values())

    def clear(self) -> None:
        self.kept.clear()
        self._count = self._bytes = 0

    def _add(self, wid: str, run_id: str, found: dict[_Key, tuple[Finished, int]]) -> None:
        old = self.kept.get(wid)
        if old is not None and old[0] == run_id:
            found = {**old[1], **found}  # not reached yet by the drive whose commit was refused
        self.forget(wid)
        self.kept[wid] = (run_id, found)  # the newest, last
        self._count += len(found)
        self._bytes += sum(size for _, size in found.values())
        while self._count > MAX_KEPT or self._bytes > MAX_KEPT_BYTES:
            oldest = next(iter(self.kept))
            dropped = len(self.kept[oldest][1])
            self.forget(oldest)
            self._engine.metrics.outcomes_dropped += dropped
            log.warning(
                "workflow %s: %d refused activity outcome(s) dropped (more than %d outcomes or %d bytes are kept); "
                "their attempts run again", oldest, dropped, MAX_KEPT, MAX_KEPT_BYTES,
            )


def _uncommitted(rec: dict[str, Any], committed: dict[str, Any] | None) -> tuple[Finished, int] | None:
    """The outcome of an activity attempt that ``rec`` (in memory) records and the store's
    ``committed`` record of the same op does not, ready to hand back; else None."""
    attempts = rec.get("attempts")
    if rec.get("kind") != "activity" or attempts is None:
        return None
    committed = committed or {}
    if "t" in committed or committed.get("attempts", 0) >= attempts:
        return None
    if "t" in rec:
        if "ok" in rec:
            payload = rec["ok"]
            try:
                value = decode(payload, "kept activity result") if payload is not None else None
            except Exception:
                return None
            return Finished(value, None), len(payload or b"")
        err = rec.get("err") or {}
        if err.get("kind") != "activity":
            return None  # cancelled: not an outcome of the attempt
        return Finished(None, DecidedFailure(err, None, rec.get("first_at"))), 0
    if "retry_at" in rec:
        return Finished(None, DecidedFailure({"message": rec.get("last_error", "")}, rec["retry_at"], rec.get("first_at"))), 0
    return None


def _size(value: Any) -> int:
    try:
        return len(encode(value))
    except Exception:
        return 0
