"""The LMDB environment: named databases, schema version and ownership-mode marker."""

from __future__ import annotations

import logging
import os
from typing import Final

import lmdb

from ..errors import OwnershipModeMismatch, SchemaVersionError, StorageError
from .._clock import Clock, SystemClock
from ._databases import DATABASES, Databases
from ._disk import storage_failure
from ._migrate import adopt_lease_clock, upgrade

__all__ = ["SCHEMA_VERSION", "DATABASES", "open_environment", "Databases", "lock_file_replaced"]

log = logging.getLogger("weft_actors.store")

SCHEMA_VERSION: Final = 6
DEFAULT_MAP_SIZE: Final = 1 << 40  # sparse: LMDB only takes what it writes

_OPEN: dict[str, list] = {}
"""path -> [env, dbs, users, lock file identity]: LMDB allows one environment per path per
process, so stores (several engines in one process, as in tests) share it."""

LOCK_FILE: Final = "lock.mdb"
DATA_FILE: Final = "data.mdb"
"""The file that holds an LMDB store: a directory without it holds none."""


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def lock_file_replaced(path: str) -> StorageError | None:
    """The error to stop writing with if ``lock.mdb`` is no longer the file this process's
    environment opened (deleted, or deleted and recreated by a process opening the store).

    LMDB keeps its write mutex and reader table in that file: a process that opens the store
    after it was deleted creates a new one and takes a different mutex, so two processes would
    write at once and corrupt the store. One ``stat``; callers run it off the commit path.
    ``path`` is the store's resolved path (``os.path.realpath``, as the caller resolved it
    once when it opened the store).
    """
    shared = _OPEN.get(path)
    if shared is None or shared[3] is None:
        return None
    lock_path = os.path.join(path, LOCK_FILE)
    now = _identity(lock_path)
    if now == shared[3]:
        return None
    what = "was deleted" if now is None else "was replaced by another file"
    return StorageError(
        f"{lock_path} {what} while this process had the store open: it holds LMDB's write "
        f"lock, and a process opening the store now would write beside this one and corrupt "
        f"it; this process stops writing. Stop every process using {path} and start them again",
        path=lock_path,
    )


def open_environment(
    path: str,
    *,
    map_size: int = DEFAULT_MAP_SIZE,
    sync: bool = True,
    readonly: bool = False,
    clock: Clock | None = None,
    create: bool = True,
) -> tuple[lmdb.Environment, Databases]:
    """Open (creating if needed) the environment at ``path`` and check its schema version.

    Only an engine or a supervisor creates a store: with ``create`` False, or ``readonly``,
    a path that holds none is ``StorageError`` and nothing is made there (an operator
    command pointed at the wrong path must not leave an empty store behind and report success).

    Call it in the process that uses the environment, after spawn: an LMDB environment must
    never cross a fork. Pair every call with ``close_environment``.
    """
    path = os.path.realpath(path)
    shared = _OPEN.get(path)
    if shared is not None:
        shared[2] += 1
        return shared[0], shared[1]
    if (readonly or not create) and not os.path.isfile(os.path.join(path, DATA_FILE)):
        raise StorageError(f"no weft_actors store at {path} (it has no {DATA_FILE}); nothing was created", path=path)
    env, dbs = _open(path, map_size=map_size, sync=sync, readonly=readonly, clock=clock or SystemClock())
    _OPEN[path] = [env, dbs, 1, None if readonly else _identity(os.path.join(path, LOCK_FILE))]
    return env, dbs


def close_environment(path: str) -> None:
    path = os.path.realpath(path)
    shared = _OPEN.get(path)
    if shared is None:
        return
    shared[2] -= 1
    if shared[2] == 0:
        del _OPEN[path]
        shared[0].close()


def _open(path: str, *, map_size: int, sync: bool, readonly: bool, clock: Clock) -> tuple[lmdb.Environment, Databases]:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise storage_failure(exc, path, f"cannot create the store directory {path}") from exc
    try:
        env = lmdb.open(
            path,
            map_size=map_size,
            max_dbs=len(DATABASES) + 2,
            max_readers=512,
            sync=sync,
            metasync=sync,
            readonly=readonly,
            readahead=False,
        )
    except lmdb.Error as exc:  # not writable: says so (``_disk``)
        raise storage_failure(exc, path, f"cannot open store at {path}") from exc
    try:
        dbs = Databases(env)
    except (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError) as exc:
        env.close()
        raise StorageError(f"store at {path} is corrupted: {exc}", path=path) from exc
    except lmdb.Error as exc:  # read-only, and a keyspace of a newer version is missing
        env.close()
        raise SchemaVersionError(
            f"store at {path} predates schema version {SCHEMA_VERSION}; open it read-write once "
            f"to upgrade it ({exc})",
            stored_version=None,
            code_version=SCHEMA_VERSION,
        ) from exc
    with env.begin(write=not readonly) as txn:
        stored = txn.get(b"schema", db=dbs.meta)
        if stored is None:
            if not readonly:
                txn.put(b"schema", str(SCHEMA_VERSION).encode(), db=dbs.meta)
        else:
            try:
                version = int(stored)
            except ValueError:
                env.close()
                raise StorageError(f"store at {path} is corrupted: unreadable schema version {bytes(stored)!r}", path=path) from None
            if version > SCHEMA_VERSION:
                env.close()
                raise SchemaVersionError(
                    f"store at {path} has schema version {version}; this code understands "
                    f"up to {SCHEMA_VERSION}: upgrade weft_actors",
                    stored_version=version,
                    code_version=SCHEMA_VERSION,
                )
            if version < SCHEMA_VERSION:
                if readonly:
                    env.close()
                    raise SchemaVersionError(
                        f"store at {path} has schema version {version}; open it read-write once "
                        f"to upgrade it to {SCHEMA_VERSION}",
                        stored_version=version,
                        code_version=SCHEMA_VERSION,
                    )
                upgrade(txn, dbs, version)
                txn.put(b"schema", str(SCHEMA_VERSION).encode(), db=dbs.meta)
                log.info("store at %s upgraded from schema version %s to %s", path, version, SCHEMA_VERSION)
        if not readonly:
            adopt_lease_clock(txn, dbs, clock)
    return env, dbs


def check_ownership_mode(txn: lmdb.Transaction[bytes], dbs: Databases, mode: str) -> None:
    """Write the ownership-mode marker if absent; refuse a different one."""
    stored = txn.get(b"ownership-mode", db=dbs.meta)
    if stored is None:
        txn.put(b"ownership-mode", mode.encode(), db=dbs.meta)
    elif stored.decode() != mode:
        raise OwnershipModeMismatch(
            f"store is in ownership mode {stored.decode()!r}; this engine is configured "
            f"for {mode!r}",
            stored_mode=stored.decode(),
            configured_mode=mode,
        )
