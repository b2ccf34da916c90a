"""Which keys each committed write transaction wrote, so the invariants after a commit look at
what changed and nothing else.

The environment of one path is shared by every store in the process (``_env._OPEN``); the
simulation puts a ``RecordingEnv`` in its place before any engine opens the store, so every
write transaction of every engine (group commits, heartbeats, takeovers, a confirmed death)
is a ``_RecordingTxn``: a thin wrapper that notes ``(keyspace, key)`` of each put and delete
(its cursors' too) and hands them to the sink only once the transaction has committed. Reads
go straight to LMDB's own methods (bound at creation, no Python in between); read
transactions are not wrapped at all.
"""

from __future__ import annotations

from typing import Any

import lmdb

__all__ = ["RecordingEnv", "StoreEnv"]


class _RecordingCursor:
    __slots__ = ("_cursor", "_name", "_writes", "set_range", "set_key", "first", "last", "next", "prev", "item", "key", "value", "iternext", "iterprev", "get")

    def __init__(self, cursor: Any, name: str, writes: list[tuple[str, bytes]]) -> None:
        self._cursor = cursor
        self._name = name
        self._writes = writes
        for method in ("set_range", "set_key", "first", "last", "next", "prev", "item", "key", "value", "iternext", "iterprev", "get"):
            setattr(self, method, getattr(cursor, method))

    def __iter__(self) -> Any:
        return iter(self._cursor)

    def __enter__(self) -> _RecordingCursor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cursor.close()

    def __getattr__(self, name: str) -> Any:
        if name in ("replace", "pop", "putmulti", "delete_multi"):
            raise NotImplementedError(f"the simulation does not record cursor.{name}")
        return getattr(self._cursor, name)

    def put(self, key: bytes, value: bytes, *args: Any, **kwargs: Any) -> bool:
        self._writes.append((self._name, bytes(key)))
        return self._cursor.put(key, value, *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> bool:
        key = self._cursor.key()
        if key:
            self._writes.append((self._name, bytes(key)))
        return self._cursor.delete(*args, **kwargs)


class _RecordingTxn:
    __slots__ = ("_txn", "_names", "_sink", "_writes", "get", "stat", "id")

    def __init__(self, txn: Any, names: dict[Any, str], sink: list[tuple[str, bytes]]) -> None:
        self._txn = txn
        self._names = names
        self._sink = sink
        self._writes: list[tuple[str, bytes]] = []
        self.get = txn.get
        self.stat = txn.stat
        self.id = txn.id

    def __enter__(self) -> _RecordingTxn:
        self._txn.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        result = self._txn.__exit__(exc_type, exc, tb)  # commits, or aborts on an exception
        if exc_type is None:
            self._sink += self._writes
        return result

    def commit(self) -> None:
        self._txn.commit()
        self._sink += self._writes
        self._writes = []

    def abort(self) -> None:
        self._txn.abort()
        self._writes = []

    def __getattr__(self, name: str) -> Any:
        if name in ("replace", "pop", "drop"):
            raise NotImplementedError(f"the simulation does not record txn.{name}")
        return getattr(self._txn, name)

    def _name(self, db: Any) -> str:
        return self._names.get(db, "?")

    # LMDB's own signatures: the hot appliers pass the database positionally.
    def put(self, key: bytes, value: bytes, dupdata: bool = True, overwrite: bool = True, append: bool = False, db: Any = None) -> bool:
        self._writes.append((self._name(db), bytes(key)))
        return self._txn.put(key, value, dupdata, overwrite, append, db)

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool:
        self._writes.append((self._name(db), bytes(key)))
        return self._txn.delete(key, value, db)

    def cursor(self, db: Any = None) -> _RecordingCursor:
        return _RecordingCursor(self._txn.cursor(db=db), self._name(db), self._writes)


class RecordingEnv:
    """Stands for the LMDB environment: write transactions record what they wrote."""

    def __init__(self, env: Any, dbs: Any, names: tuple[str, ...]) -> None:
        self._env = env
        self._names = {getattr(dbs, name): name for name in names}
        self.written: list[tuple[str, bytes]] = []
        """``(keyspace, key)`` written by committed transactions since the last ``take``."""
        self.info = env.info
        self.stat = env.stat
        self._begin = env.begin

    def begin(self, db: Any = None, parent: Any = None, write: bool = False, **kwargs: Any) -> Any:
        txn = self._begin(db=db, parent=parent, write=write, **kwargs)
        return _RecordingTxn(txn, self._names, self.written) if write else txn

    def take(self) -> list[tuple[str, bytes]]:
        written = self.written[:]
        self.written.clear()  # in place: open transactions hold this list
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class StoreEnv:
    """One store's handle on the shared environment. In a real process the environment
    closes with the store; here it stays open for the others, so once this store is closed
    every use of it raises what a closed environment raises (``lmdb.Error``)."""

    def __init__(self, env: RecordingEnv, store: Any) -> None:
        self._env = env
        self._store = store

    def begin(self, db: Any = None, parent: Any = None, write: bool = False, **kwargs: Any) -> Any:
        if self._store._closed:
            raise lmdb.Error("Attempt to operate on closed/deleted/dropped object.")
        return self._env.begin(db=db, parent=parent, write=write, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if self._store._closed:
            raise lmdb.Error("Attempt to operate on closed/deleted/dropped object.")
        return getattr(self._env, name)
