"""``list --memo KEY=VALUE``: the command line's memo filter (repeatable; every field must match).

A value reads as JSON when it is a JSON integer, ``true``, ``false`` or a string in double
quotes (``tier=3``, ``vip=true``, ``code='"042"'``); anything else is the text as typed
(``customer=acme``). Those are the values the memo index holds (``store._memo``); other JSON
(an object, a list, a number with a fraction, null) is refused here, as the index never holds it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .errors import InvalidRequest

__all__ = ["add_memo_filter", "memo_filter"]


def _memo_field(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. customer=acme)")
    try:
        value = json.loads(raw)
    except ValueError:
        return key, raw
    if not isinstance(value, (str, int)):  # bool is an int
        raise argparse.ArgumentTypeError(
            f"{text!r}: only a string, an integer, true or false is searchable (nested values and "
            f"numbers with a fraction are not indexed); to match the text, quote it: {key}='{json.dumps(raw)}'"
        )
    return key, value


def add_memo_filter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memo", dest="memo_filter", type=_memo_field, action="append", metavar="KEY=VALUE",
        help="only workflows whose memo has KEY equal to VALUE (repeat: all must match)",
    )


def memo_filter(args: argparse.Namespace) -> dict[str, Any] | None:
    """The filter ``client.list(memo=...)`` takes, or None; one key given twice is refused."""
    fields = getattr(args, "memo_filter", None)
    if not fields:
        return None
    found: dict[str, Any] = {}
    for key, value in fields:
        if key in found and found[key] != value:
            raise InvalidRequest(f"--memo {key} is given twice ({found[key]!r} and {value!r}); a workflow's memo holds one value per key")
        found[key] = value
    return found
