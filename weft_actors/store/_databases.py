"""The named databases of a store, and the handles of one open environment's.

Below the environment and its migrations, which both name them.
"""

from __future__ import annotations

from typing import Final

import lmdb

__all__ = ["DATABASES", "Databases"]

DATABASES: Final = (
    "workflows",
    "ops",
    "inbox",
    "feed",
    "timers",
    "claim_epoch",
    "claim_holder",
    "engines",
    "by_engine",
    "visibility",
    "recent",
    "expiring",
    "requests",
    "meta",
    "memo",
)


class Databases:
    """Handles of the named databases of one open environment."""

    __slots__ = DATABASES

    workflows: lmdb._Database
    ops: lmdb._Database
    inbox: lmdb._Database
    feed: lmdb._Database
    timers: lmdb._Database
    claim_epoch: lmdb._Database
    claim_holder: lmdb._Database
    engines: lmdb._Database
    by_engine: lmdb._Database
    visibility: lmdb._Database
    recent: lmdb._Database
    expiring: lmdb._Database
    requests: lmdb._Database
    meta: lmdb._Database
    memo: lmdb._Database

    def __init__(self, env: lmdb.Environment) -> None:
        for name in DATABASES:
            setattr(self, name, env.open_db(name.encode()))
