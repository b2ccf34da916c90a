"""Reading a store that may be corrupt, for the invariant checker (``_check``).

Every key and record is decoded here, and what cannot be read becomes a ``Problem``
(``unreadable_record``, ``unreadable_keyspace``) instead of an exception: the checks then see
only what was read."""

from __future__ import annotations

import struct
from typing import Any, Callable, Iterator, NamedTuple

import lmdb

from ..codec import unpack_record
from ._databases import Databases
from ._keys import STATUS_CODES, split_holder, unpack_u64

__all__ = ["Problem", "split_op_key", "split_inbox_key", "split_request_key", "split_by_engine_key", "u64", "feed_stamp", "decode_holder", "record_of", "workflow_decoder", "ENGINE_FIELDS", "Reader", "decode_wid", "readable_key", "valid_workflow"]


class Problem(NamedTuple):
    kind: str
    workflow_id: str | None
    detail: str

    def __str__(self) -> str:
        where = f" [{self.workflow_id}]" if self.workflow_id is not None else ""
        return f"{self.kind}{where}: {self.detail}"


def split_op_key(key: bytes) -> tuple[str, str, int]:
    (length,) = struct.unpack_from(">H", key)
    if len(key) != 22 + length:
        raise ValueError(f"an op key of {len(key)} bytes for a workflow id of {length}")
    wid = key[2 : 2 + length].decode()
    run = key[2 + length : 18 + length].hex()
    (seq,) = struct.unpack_from(">I", key, 18 + length)
    return wid, run, seq


def split_inbox_key(key: bytes) -> tuple[str, int]:
    (length,) = struct.unpack_from(">H", key)
    return key[2 : 2 + length].decode(), u64(key[2 + length :])


def split_request_key(key: bytes) -> tuple[str, str]:
    (length,) = struct.unpack_from(">H", key)
    if len(key) < 2 + length:
        raise ValueError("key shorter than its workflow id")
    return key[2 : 2 + length].decode(), key[2 + length :].decode(errors="replace")


def split_by_engine_key(key: bytes) -> tuple[bytes, str]:
    if len(key) < 17:
        raise ValueError("key shorter than an engine id and a workflow id")
    return bytes(key[:16]), key[16:].decode()


def u64(value: bytes) -> int:
    if len(value) != 8:
        raise ValueError(f"{len(value)} bytes where a 64-bit number belongs")
    return unpack_u64(value)[0]


def feed_stamp(value: bytes) -> int:
    if len(value) < 8:
        raise ValueError(f"a feed entry of {len(value)} bytes")
    return unpack_u64(value[:8])[0]


def decode_holder(value: bytes) -> tuple[str, int, float]:
    if len(value) != 32:
        raise ValueError(f"{len(value)} bytes where a 32-byte holder belongs")
    return split_holder(value)


def _guess_wid(key: bytes) -> str | None:
    """The workflow id at the start of a length-prefixed key, when it can be read at all."""
    try:
        (length,) = struct.unpack_from(">H", key)
        return key[2 : 2 + length].decode() if len(key) >= 2 + length else None
    except (struct.error, UnicodeDecodeError):
        return None


def record_of(fields: dict[str, type | tuple[type, ...]], unpack: Callable[[bytes], Any] = unpack_record) -> Callable[[bytes], dict[str, Any]]:
    """A decoder that also insists on the fields (and their types) the checks rely on."""

    def decode(value: bytes) -> dict[str, Any]:
        record = unpack(value)
        if type(record) is not dict:
            raise ValueError(f"a {type(record).__name__}, not a record")
        for name, kind in fields.items():
            if name not in record:
                raise ValueError(f"field {name!r} is missing")
            if not isinstance(record[name], kind):
                raise ValueError(f"field {name!r} is a {type(record[name]).__name__}")
        return record

    return decode


_NUMBER = (int, float)
WORKFLOW_FIELDS: dict[str, type | tuple[type, ...]] = {"status": str, "type": str, "run_id": (str, bytes), "updated": _NUMBER}
ENGINE_FIELDS: dict[str, type | tuple[type, ...]] = {"state": str, "expires_at": _NUMBER, "heartbeat": _NUMBER}


def workflow_decoder(unpack: Callable[[bytes], Any] = unpack_record) -> Callable[[bytes], dict[str, Any]]:
    """A decoder of workflow records that also insists on a known status."""
    decode = record_of(WORKFLOW_FIELDS, unpack)

    def valid(value: bytes) -> dict[str, Any]:
        record = decode(value)
        if record["status"] not in STATUS_CODES:
            raise ValueError(f"unknown status {record['status']!r}")
        return record

    return valid


def _read_errors(txn: Any) -> tuple[type[Exception], ...]:
    """What a failed read raises in ``txn``: LMDB's errors, and for any other transaction (a
    ``PgTxn``) the PostgreSQL driver's too. The driver is an optional extra: imported only
    when a transaction may be its."""
    if isinstance(txn, lmdb.Transaction):
        return (lmdb.Error,)
    try:
        import psycopg
    except ImportError:
        return (lmdb.Error,)
    return (lmdb.Error, psycopg.Error)


def _read_failure(exc: Exception) -> str:
    """What failed, on one line as every problem is (PostgreSQL's messages go on to quote
    the statement on lines of their own)."""
    if isinstance(exc, lmdb.Error):
        return f"LMDB failed while reading it ({exc})"
    first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"PostgreSQL failed while reading it ({first_line})"


class Reader:
    """Walks keyspaces in one transaction; what cannot be read becomes a problem, not a crash."""

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: Databases) -> None:
        self.txn = txn
        self.dbs = dbs
        self.problems: list[Problem] = []
        self.pending_inbox: dict[str, set[int]] | None = None
        self.read_errors = _read_errors(txn)

    def raw(self, name: str, values: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` of keyspace ``name`` (value ``b""`` without ``values``)."""
        try:
            cursor = self.txn.cursor(db=getattr(self.dbs, name))
            if values:
                for key, value in cursor:
                    yield key, value
            else:
                for key in cursor.iternext(values=False):
                    yield key, b""
        except self.read_errors as exc:
            self.problems.append(
                Problem("unreadable_keyspace", None, f"{name}: {_read_failure(exc)}; the rest of it was not checked")
            )

    def entries(
        self,
        name: str,
        key: Callable[[bytes], Any] | None = None,
        value: Callable[[bytes], Any] | None = None,
        wid: Callable[[bytes], str | None] = _guess_wid,
        values: bool = True,
    ) -> Iterator[tuple[Any, Any]]:
        """``(decoded key, decoded value)`` of each entry both decoders accept; the others
        are reported with their keyspace and key."""
        for raw_key, raw_value in self.raw(name, values):
            try:
                decoded_key = raw_key if key is None else key(raw_key)
                decoded_value = raw_value if value is None else value(raw_value)
            except Exception as exc:
                self.problems.append(
                    Problem("unreadable_record", wid(raw_key), f"{name} key {bytes(raw_key)!r}: {type(exc).__name__}: {exc}")
                )
                continue
            yield decoded_key, decoded_value


def decode_wid(key: bytes) -> str:
    return key.decode()


def readable_key(key: bytes) -> str | None:
    try:
        return key.decode()
    except UnicodeDecodeError:
        return None


valid_workflow = workflow_decoder()
