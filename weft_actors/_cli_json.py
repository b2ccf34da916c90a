"""The command line's JSON arguments (``ARGS_JSON``, ``--payload``, ``--memo``), read by argparse.

Whatever the text, reading it fails with one line that says what is wrong, never with a
traceback: not JSON at all (a usage error, with the form it should take), or nested deeper
than the parser recurses (``InvalidRequest``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .errors import InvalidRequest

__all__ = ["json_args", "json_value"]


def json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({exc}): {_json_hint(text)}") from None
    except RecursionError:  # the parser recurses per level of nesting
        # Not an ArgumentTypeError: argparse would print its usage before it. This one passes
        # through parse_args and is printed as every other refused request is, in one line.
        raise InvalidRequest(f"the JSON argument {_start(text)} ({len(text)} characters) is nested too deeply to read") from None


def _start(text: str) -> str:
    return repr(text if len(text) <= 24 else text[:20] + "...")


def _json_hint(text: str) -> str:
    """What the argument should look like: users type ``start hello world`` for ``'["world"]'``."""
    quoted = json.dumps(text)
    return f"write a string in double quotes, e.g. '{quoted}', or the arguments as a JSON array, e.g. '[{quoted}]'"


def json_args(text: str) -> tuple[Any, ...]:
    """A JSON array is the positional arguments; any other JSON value is the one argument."""
    value = json_value(text)
    return tuple(value) if isinstance(value, list) else (value,)
