"""An incremental store check: after each commit, the store checker runs over the entries of
the workflows that commit touched (plus the global ones), not over the whole store.

The mirror keeps the raw bytes of every keyspace the checker reads, per workflow. After a
commit it reads again only the keys the committed transactions wrote (``_recording``), so its
cost follows the size of the change, not of the store. Every problem the checker can report
belongs to one workflow's entries (its record, ops, inbox, claims, visibility, timers,
requests) except two: a holder naming an engine not in the registry (so a change to the set
of engines re-checks every workflow) and the feed's age, which depends on the engines and
the time and is checked on every commit but a pure lease renewal (an engine record that is
live after the write: with a live engine the feed check has nothing to say).
``weft_actors.store._check.check_environment`` itself runs over a view of those entries, so
every check it has is made, unchanged; the end of a run checks the whole store once more.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterator

from weft_actors.codec import unpack_record
from weft_actors.store import _check
from weft_actors.store._check import Problem, check_environment
from weft_actors.store._keys import split_visibility_key

__all__ = ["StoreMirror", "KEYSPACES"]


def _plain(key: bytes) -> str:
    return key.decode()


def _prefixed(key: bytes) -> str:
    length = int.from_bytes(key[:2], "big")
    if len(key) < 2 + length:
        raise ValueError("key shorter than its workflow id")
    return key[2 : 2 + length].decode()


WID_OF: dict[str, Callable[[bytes], str]] = {
    "workflows": _plain,
    "claim_epoch": _plain,
    "claim_holder": _plain,
    "ops": _prefixed,
    "inbox": _prefixed,
    "requests": _prefixed,
    "by_engine": lambda key: key[16:].decode(),
    "visibility": lambda key: split_visibility_key(key)[2],
    "expiring": lambda key: key[8:].decode(),
    "timers": lambda key: key[12:].decode(),
}
"""How each per-workflow keyspace's key names its workflow. A key that names none (it
cannot be read) is kept under ``None``, which every check includes."""

KEYSPACES = (*WID_OF, "engines")
"""What the mirror keeps (the feed is read where it starts, the only entry checked)."""


class _Names:
    """What the checker takes for ``dbs``: each keyspace is named by itself."""

    def __getattr__(self, name: str) -> str:
        return name


class _Cursor:
    def __init__(self, items: list[tuple[bytes, bytes]]) -> None:
        self._items = items

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._items)

    def iternext(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        if keys and values:
            return iter(self._items)
        return iter([key if keys else value for key, value in self._items])


class _View:
    """A read-only transaction over chosen entries, in the store's key order."""

    def __init__(self, tables: dict[str, list[tuple[bytes, bytes]]]) -> None:
        self._tables = tables

    def cursor(self, db: str) -> _Cursor:
        return _Cursor(self._tables[db])


class StoreMirror:
    """The raw entries of the store as of the last check, and per workflow where they are."""

    def __init__(self, dbs: Any) -> None:
        self._dbs = dbs
        self.raw: dict[str, dict[bytes, bytes]] = {name: {} for name in KEYSPACES}
        self._by_wid: dict[str, dict[str | None, dict[bytes, bytes]]] = {name: defaultdict(dict) for name in WID_OF}
        self._feed_head: list[tuple[bytes, bytes]] = []
        self._decoded: dict[bytes, Any] = {}
        """raw record -> decoded: the checker reads records and never changes them, and most
        are the same bytes on every check (an engine record between heartbeats, past ops)."""

    def decode(self, data: bytes) -> Any:
        record = self._decoded.get(data)
        if record is None:
            record = self._decoded[data] = unpack_record(data)
        return record

    def update(self, txn: Any, written: list[tuple[str, bytes]]) -> dict[str, dict[bytes, tuple[bytes | None, bytes | None]]]:
        """Read the ``written`` keys in ``txn``; returns what changed per keyspace:
        key -> (before, after), ``None`` for absent."""
        changes: dict[str, dict[bytes, tuple[bytes | None, bytes | None]]] = {}
        dbs = self._dbs
        for name, key in dict.fromkeys(written):
            if name == "feed":
                self._feed_head = []
                cursor = txn.cursor(db=dbs.feed)
                if cursor.first():
                    self._feed_head = [cursor.item()]
                changes.setdefault("feed", {})
                continue
            mirror = self.raw.get(name)
            if mirror is None:
                continue  # meta: nothing the checker reads
            new = txn.get(key, db=getattr(dbs, name))
            old = mirror.get(key)
            if new == old:
                continue
            changes.setdefault(name, {})[key] = (old, new)
            if new is None:
                del mirror[key]
            else:
                mirror[key] = new
            index = self._by_wid.get(name)
            if index is None:
                continue
            try:
                wid: str | None = WID_OF[name](key)
            except Exception:
                wid = None
            if new is None:
                entries = index.get(wid)
                if entries is not None:
                    entries.pop(key, None)
                    if not entries:
                        del index[wid]
            else:
                index[wid][key] = new
        return changes

    def differences(self, txn: Any) -> list[str]:
        """Where the mirror and the store disagree (``SIM_CROSS_CHECK``: a write not recorded)."""
        found = []
        for name, mirror in self.raw.items():
            actual = dict(txn.cursor(db=getattr(self._dbs, name)))
            if actual != mirror:
                keys = sorted(key for key, _ in actual.items() ^ mirror.items())
                found.append(f"{name}: {keys[:3]}")
        return found

    def touched(self, changes: dict[str, dict[bytes, Any]]) -> set[str | None]:
        """The workflows whose entries changed (every one if the set of engines did)."""
        engines = changes.get("engines", {})
        if any(before is None or after is None for before, after in engines.values()):
            return self.all_workflows()
        wids: set[str | None] = set()
        for name, keys in changes.items():
            wid_of = WID_OF.get(name)
            if wid_of is None:
                continue
            for key in keys:
                try:
                    wids.add(wid_of(key))
                except Exception:
                    wids.add(None)
        return wids

    def all_workflows(self) -> set[str | None]:
        return {wid for index in self._by_wid.values() for wid in index}

    @staticmethod
    def only_renewals(changes: dict[str, dict[bytes, Any]], lease_now: float) -> bool:
        """Nothing changed but engine records that are live after the change (the checker's
        own test of a live engine, on the lease clock): the feed check is silent while any
        engine is live."""
        if set(changes) - {"engines"}:
            return False
        for before, after in changes.get("engines", {}).values():
            if before is None or after is None:
                return False
            record = unpack_record(after)
            if not (record["state"] == "live" and record["expires_at"] + 2 * record["heartbeat"] >= lease_now):
                return False
        return True

    def check(self, wids: set[str | None], now: float, feed_retention: float, lease_now: float) -> list[Problem]:
        """The store checker's problems among ``wids``' entries and the global ones."""
        wids = wids | {None}
        tables: dict[str, list[tuple[bytes, bytes]]] = {}
        for name, index in self._by_wid.items():
            items: list[tuple[bytes, bytes]] = []
            for wid in wids:
                entries = index.get(wid)
                if entries:
                    items += entries.items()
            items.sort()
            tables[name] = items
        tables["engines"] = sorted(self.raw["engines"].items())
        tables["feed"] = self._feed_head
        decode, _check.unpack_record = _check.unpack_record, self.decode
        try:
            return check_environment(_View(tables), _Names(), now, feed_retention, lease_now)  # type: ignore[arg-type]
        finally:
            _check.unpack_record = decode
