"""How the command line prints an answer: one JSON document with ``--json``, otherwise a
readable form (times as their ISO 8601 twins, lists as aligned columns).

Kept apart from ``cli`` so each group of commands (``_cli_schedule``, ...) prints the same way
without importing the parser that imports it.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import json
import uuid
from typing import Any, Sequence, TextIO

__all__ = ["dumps", "emit", "iso_times", "readable", "table", "columns"]


def _json_default(value: Any) -> Any:
    """Printable stand-ins for what the codec carries but JSON does not."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return repr(value)


def dumps(value: Any, *, indent: int | None = None) -> str:
    # Non-string keys (ints, tuples) are made strings rather than failing the whole output.
    return json.dumps(_string_keys(value), default=_json_default, indent=indent, ensure_ascii=False)


def _string_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k if isinstance(k, str) else dumps(k): _string_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_string_keys(v) for v in value]
    return value


def readable(value: Any) -> str:
    return value if isinstance(value, str) else dumps(value, indent=2)


def iso_times(value: Any) -> Any:
    """``value`` for a person: each time that has an ISO 8601 twin (``created`` beside
    ``created_iso``) shown as that text, in its place, and the twin dropped."""
    if isinstance(value, list):
        return [iso_times(item) for item in value]
    if not isinstance(value, dict):
        return value
    shown = {}
    for key, item in value.items():
        if isinstance(key, str) and key.endswith("_iso") and key[:-4] in value:
            continue
        twin = f"{key}_iso" if isinstance(key, str) else None
        shown[key] = value[twin] if twin in value else iso_times(item)
    return shown


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the first is the header) as lines of left-aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def table(page: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [("ID", "TYPE", "STATUS", "UPDATED")]
    for item in page.get("items") or []:
        item = iso_times(item)
        rows.append(tuple(readable(item.get(key)) if item.get(key) is not None else "-" for key in ("id", "type", "status", "updated")))
    lines = columns(rows)
    if page.get("cursor"):
        lines.append(f"next: --cursor {page['cursor']}")
    return "\n".join(lines)


def emit(args: argparse.Namespace, out: TextIO, value: Any, shown: str) -> None:
    print(dumps(value) if args.json else shown, file=out)
