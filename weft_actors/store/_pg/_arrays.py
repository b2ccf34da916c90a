"""``bytea[]`` parameters in PostgreSQL's binary array format, built in one pass.

A group commit sends its rows as arrays (``_batch_sql.write_query``) and reads its rows by
arrays of keys (``_env.send_prefetch``): some thirty array items per workflow. psycopg's own
list dumper walks each list in Python, several calls per item, on the writer thread that
shares the GIL with the engine's loop. The wire format of a one-dimensional ``bytea[]`` of
non-null items is simple (a header, then each item's length and bytes), so ``encode`` builds
it with one comprehension and a join, and ``ByteaArrayDumper`` hands it to the server as is.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["ByteaArray", "ByteaArrayDumper", "encode", "register"]

BYTEA_OID: Final = 17
BYTEA_ARRAY_OID: Final = 1001

_LENGTH = struct.Struct("!i").pack
_HEADER = struct.Struct("!iiIii").pack  # dimensions, has nulls, element type, length, lower bound
_EMPTY = struct.Struct("!iiI").pack(0, 0, BYTEA_OID)  # no dimensions: '{}'


class ByteaArray:
    """A ``bytea[]`` parameter already in binary wire form (``encode``)."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.count = count

    def __len__(self) -> int:
        return self.count


def encode(items: list[bytes]) -> ByteaArray:
    """``items`` (``bytes``, none of them None) as one binary ``bytea[]`` parameter."""
    if not items:
        return ByteaArray(_EMPTY, 0)
    return ByteaArray(_HEADER(1, 0, BYTEA_OID, len(items), 1) + b"".join([_LENGTH(len(item)) + item for item in items]), len(items))


class ByteaArrayDumper(Dumper):
    """Sends a ``ByteaArray`` as the ``bytea[]`` it already is."""

    format = Format.BINARY
    oid = BYTEA_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        return obj.data  # type: ignore[no-any-return]


def register(conn: psycopg.Connection[Any]) -> None:
    """Let ``conn`` take ``ByteaArray`` parameters (``%b``)."""
    conn.adapters.register_dumper(ByteaArray, ByteaArrayDumper)
