"""The storage reserve: the last pages of the LMDB map are kept for the writes that free space.

In LMDB even a delete needs free pages (copy-on-write of every page on the path, and the
freelist itself), so a map filled to the last page cannot be emptied: purge and the retention
prune would fail with ``StorageFull`` like everything else. So once the pages in use come
within the reserve of the map size, the group commit refuses new work and progress of running
workflows (``GROWTH`` intents) with ``StorageFull``, while purges, closes, cancel requests,
heartbeats, takeovers and the retention prune still commit. When they have freed room, refused
steps are driven again and new work is taken.

Cost: one ``env.info()`` per commit while the map's high-water mark is below the threshold;
above it, one ``stat`` per keyspace (a few microseconds), in the commit's own transaction.
"""

from __future__ import annotations

from typing import Final

import lmdb

from ..errors import StorageFull
from ._env import DATABASES, Databases
from ._intents import AppendInbox, CreateWorkflow, StepCommit
from ._messages import AppendAndConsume, SignalWithStart

__all__ = ["StorageReserve", "GROWTH"]

GROWTH: Final = frozenset({CreateWorkflow, AppendInbox, AppendAndConsume, SignalWithStart, StepCommit})
"""Intents refused inside the reserve: everything that only adds data."""

MIN_PAGES: Final = 64
"""About what one purge needs in a small store (copy-on-write along ~8 keyspaces and the freelist)."""
MAX_BYTES: Final = 64 << 20


class StorageReserve:
    """Decides, inside a write transaction, whether the store is within its reserve."""

    __slots__ = ("_env", "_dbs", "_psize")

    def __init__(self, env: lmdb.Environment, dbs: Databases) -> None:
        self._env = env
        self._dbs = dbs
        self._psize = env.stat()["psize"]

    def pages(self, map_pages: int) -> int:
        """``1/32`` of the map, but at least ``MIN_PAGES`` (at most a quarter of a tiny map) and
        at most ``MAX_BYTES``: 256 KiB of a 1 MiB map, 64 MiB of the default sparse 1 TiB."""
        return max(min(MIN_PAGES, map_pages // 4), min(map_pages // 32, MAX_BYTES // self._psize))

    def check(self, txn: lmdb.Transaction[bytes]) -> StorageFull | None:
        """The error for growth intents if the pages in use reach into the reserve, else None."""
        info = self._env.info()
        map_pages = info["map_size"] // self._psize
        reserve = self.pages(map_pages)
        if info["last_pgno"] + 1 + reserve < map_pages:
            return None  # the high-water mark is below the reserve: there is room
        used = 2  # the two meta pages
        for stat in [self._env.stat(), *(txn.stat(getattr(self._dbs, name)) for name in DATABASES)]:
            used += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
        if used + reserve < map_pages:
            return None
        return StorageFull(
            f"store is full: {used} of {map_pages} pages ({info['map_size']} bytes) are in use, and the "
            f"last {reserve} are kept for purge, retention and takeovers; free space or enlarge the map",
            used_pages=used,
            map_pages=map_pages,
            reserve_pages=reserve,
        )

