"""When the store last refused a commit for itself (full, within its reserve, read-only, I/O).

A workflow whose steps the store refuses cannot make progress, however healthy its code. If its
owner is lost meanwhile (killed, or its lease lapsed because its heartbeats were refused too),
the takeover would see the same progress mark as at the workflow's previous loss and count it
as a poison's (``_quarantine``): a few kills during a full disk parked innocent workflows. So
the time of the last refusal (lease clock) is kept in ``meta`` under ``refused``; a loss with
no progress since the previous one counts only if the store refused nothing in between.

A refused transaction commits nothing, so the time is noted in memory and written by this
process's next group commit or takeover (which writes it before it judges anything), never by
the transactions that free room (a prune, a purge): in a full store their pages are counted.
The hot path pays one attribute test per commit; a put at most once per ``RESOLUTION``.
"""

from __future__ import annotations

import struct
from typing import Final

import lmdb

from .._clock import Clock
from ._env import Databases

__all__ = ["Refusals", "last_refusal"]

REFUSED_KEY: Final = b"refused"
_FLOAT: Final = struct.Struct(">d")
RESOLUTION: Final = 1.0


def last_refusal(txn: lmdb.Transaction[bytes], dbs: Databases) -> float | None:
    """The lease-clock time of the last refusal any process wrote, or None if none ever was."""
    raw = txn.get(REFUSED_KEY, db=dbs.meta)
    return None if raw is None else float(_FLOAT.unpack(raw)[0])


class Refusals:
    """This process's refusals not yet written to the store."""

    __slots__ = ("_clock", "pending", "latest", "failed_at")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.pending = False
        """A refusal is noted that no committed transaction carries yet (test it first: cheap)."""
        self.latest = 0.0
        self.failed_at = 0.0
        """When a whole transaction of this process last failed for the store (full map or
        disk, read-only, I/O): then no engine could renew its lease (``_engines.is_expired``)."""

    def floor(self, since: float) -> None:
        """No lease could be renewed before ``since`` (a database server started then: an
        engine that saw nothing of its outage must not judge others by leases it stopped).
        Counted as a failure then, for judging expiry only; nothing is written."""
        if since > self.failed_at:
            self.failed_at = since

    def floor_now(self) -> None:
        """``floor`` at the lease clock's time now: this process waited so long on its store
        (a PostgreSQL round trip that stalled, ``_pg._connect.STALLED``) that, as far as it
        knows, nobody could renew a lease meanwhile."""
        self.floor(self._clock.lease_now())

    def note(self, failed: bool = False) -> None:
        """A refusal now; ``failed``: the whole transaction failed (not only growth refused)."""
        self.latest = self._clock.lease_now()
        self.pending = True
        if failed:
            self.failed_at = self.latest

    def write(self, txn: lmdb.Transaction[bytes], dbs: Databases) -> float:
        """Put the noted time in ``txn``, unless the stored one is later or less than
        ``RESOLUTION`` older: a full store refuses commit after commit, and each put would
        copy pages of the reserve kept for the writes that free room. Returns the time it
        stands for, for ``committed``."""
        stored = last_refusal(txn, dbs)
        if stored is None or self.latest - stored >= RESOLUTION:
            txn.put(REFUSED_KEY, _FLOAT.pack(self.latest), db=dbs.meta)
        return self.latest

    def committed(self, written: float) -> None:
        """The transaction that ``write`` returned ``written`` for has committed."""
        if written == self.latest:
            self.pending = False
