"""A memo filter as people type it: ``list --memo KEY=VALUE`` (repeatable) on the command line,
``KEY=VALUE, KEY=VALUE`` in the console's memo field; every field must match.

A value reads as JSON when it is a JSON integer, ``true``, ``false`` or a string in double
quotes (``tier=3``, ``vip=true``, ``code="042"``, ``note="a, b"``); anything else that is not
JSON is the text as typed (``customer=acme``). Those are the values the memo index holds
(``store._memo``); other JSON (an object, a list, a number with a fraction, null) is refused
here, as the index never holds it.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any, Final

from .errors import InvalidRequest

__all__ = ["add_memo_filter", "memo_filter", "memo_value", "parse_memo_text"]

_FIELD: Final = re.compile(r'\s*([^=,]+?)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]*?)\s*(?:,|$)')


def memo_value(key: str, raw: str) -> tuple[str, Any]:
    """``(key, value)`` of one ``KEY=VALUE``; ``InvalidRequest`` for JSON no index holds."""
    if not key:
        raise InvalidRequest(f"{key}={raw!r} is not KEY=VALUE (e.g. customer=acme)")
    try:
        value = json.loads(raw)
    except ValueError:
        return key, raw
    except RecursionError:  # JSON nested deeper than the parser recurses: nested, so refused
        raise InvalidRequest(f"{key}=...: a nested value ({len(raw)} characters) is not searchable") from None
    if not isinstance(value, (str, int)):  # bool is an int
        raise InvalidRequest(
            f"{key}={raw}: only a string, an integer, true or false is searchable (nested values and "
            f"numbers with a fraction are not indexed); to match the text, quote it: {key}={json.dumps(raw)}"
        )
    return key, value


def _merged(fields: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in fields:
        if key in found and found[key] != value:
            raise InvalidRequest(f"memo key {key!r} is given twice ({found[key]!r} and {value!r}); a workflow's memo holds one value per key")
        found[key] = value
    return found


def parse_memo_text(text: str) -> dict[str, Any] | None:
    """The console's field: ``KEY=VALUE`` pairs separated by commas (a value with a comma in
    double quotes); None when empty; ``InvalidRequest`` for anything else."""
    text = text.strip()
    if not text:
        return None
    fields = []
    position = 0
    while position < len(text):
        match = _FIELD.match(text, position)
        if match is None or match.end() == position:
            raise InvalidRequest(f"memo filter {text!r}: expected KEY=VALUE, KEY=VALUE (e.g. customer=acme, region=eu)")
        fields.append(memo_value(match.group(1), match.group(2)))
        position = match.end()
    return _merged(fields)


def _memo_field(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. customer=acme)")
    try:
        return memo_value(key, raw)
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_memo_filter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memo", dest="memo_filter", type=_memo_field, action="append", metavar="KEY=VALUE",
        help="only workflows whose memo has KEY equal to VALUE (repeat: all must match)",
    )


def memo_filter(args: argparse.Namespace) -> dict[str, Any] | None:
    """The filter ``client.list(memo=...)`` takes, or None; one key given twice is refused."""
    fields = getattr(args, "memo_filter", None)
    return _merged(fields) if fields else None
