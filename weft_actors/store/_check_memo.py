"""The checker's view of the memo index (``_memo``): every entry is one the memo of an existing
workflow gives, and every such entry is there. A whole-store check (``_check``): a listing by
memo that misses a workflow, or lists a purged one, is the failure it finds."""

from __future__ import annotations

import struct
from typing import Any

from ._check_read import Problem, Reader, decode_wid, readable_key, valid_workflow
from ._databases import Databases
from ._memo import memo_fields

__all__ = ["check_memo"]

_U16 = struct.Struct(">H")
_SHOWN = 20
"""Problems of each kind reported by name at most; a broken index is one finding, not a flood."""


def _entry_wid(key: bytes) -> str:
    """The workflow id at the end of an index key (``?`` for a key too short to hold one)."""
    try:
        (key_len,) = _U16.unpack_from(key, 0)
        (value_len,) = _U16.unpack_from(key, 2 + key_len + 1)
        return key[2 + key_len + 1 + 2 + value_len :].decode(errors="replace") or "?"
    except struct.error:
        return "?"


def check_memo(txn: Any, dbs: Databases) -> list[Problem]:
    reader = Reader(txn, dbs)
    expected: set[bytes] = set()
    for wid, record in reader.entries("workflows", decode_wid, valid_workflow, wid=readable_key):
        wid_raw = wid.encode()
        expected.update(prefix + wid_raw for prefix in memo_fields(record.get("memo")))
    problems: list[Problem] = []
    orphans = 0
    for key, _ in reader.raw("memo", values=False):
        key = bytes(key)
        if key in expected:
            expected.discard(key)
            continue
        orphans += 1
        if orphans <= _SHOWN:
            problems.append(Problem("memo_index_orphan", _entry_wid(key), "a memo index entry its workflow's memo does not give (or of no workflow)"))
    for count, key in enumerate(sorted(expected)):
        if count == _SHOWN:
            break
        problems.append(Problem("memo_index_missing", _entry_wid(key), "a searchable memo field the memo index does not hold"))
    if orphans > _SHOWN or len(expected) > _SHOWN:
        problems.append(Problem("memo_index_mismatch", None, f"{orphans} orphan and {len(expected)} missing memo index entries in all"))
    return problems
