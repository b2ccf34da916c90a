"""Checks of caller input shared by the engine's client calls and the workflow context.

Every id, name and time a caller gives is checked here, before anything is written: a value
the store cannot key (an empty id, a time that does not fit its timer keys) must be refused
at the call that carried it, never fail a group commit that other calls share.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Final

from .errors import InvalidRequest

__all__ = ["MAX_ID_BYTES", "MAX_SECONDS", "MAX_INSTANT", "MIN_PRIORITY", "MAX_PRIORITY", "validate_id", "validate_name", "not_text", "check_seconds", "check_instant", "check_priority"]

MAX_ID_BYTES: Final = 256
MAX_SECONDS: Final = 100 * 365.25 * 86400.0
"""The longest duration accepted (a century): timers, timeouts and delays."""
MAX_INSTANT: Final = 253402300799.0
"""The latest absolute time accepted (the end of year 9999, UTC), in epoch seconds."""
MIN_PRIORITY: Final = -128
MAX_PRIORITY: Final = 127
"""A start's ``priority`` in a flow-control queue: one byte of its queue key."""


def validate_id(wid: Any, what: str = "a workflow id") -> str:
    """``wid`` if it is a non-empty string without NUL of at most ``MAX_ID_BYTES`` bytes of
    UTF-8 (a lone surrogate has none: refused here, named, not a bare ``UnicodeEncodeError``
    from the encoder)."""
    if not isinstance(wid, str) or not wid:
        raise InvalidRequest(f"{what} must be a non-empty string, not {wid!r}")
    if "\x00" in wid:
        raise InvalidRequest(f"{what} must not contain NUL")
    try:
        size = len(wid.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate (an undecodable byte of argv, say)
        raise InvalidRequest(f"{what} must be valid Unicode text: {_surrogate(wid, exc)}") from None
    if size > MAX_ID_BYTES:
        raise InvalidRequest(f"{what} is at most {MAX_ID_BYTES} bytes", limit=MAX_ID_BYTES)
    return wid


def not_text(op: str, fields: dict[str, Any]) -> InvalidRequest:
    """The error for a request whose ``fields`` UTF-8 cannot encode, naming the field: a
    string no check above covers (a workflow type, say) met the encoder. Only on that path."""
    for field, value in fields.items():
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                return InvalidRequest(f"{op}: {field} must be valid Unicode text: {_surrogate(value, exc)}")
    return InvalidRequest(f"{op}: a field is not valid Unicode text (it holds a lone surrogate)")


def _surrogate(text: str, exc: UnicodeEncodeError) -> str:
    """Where ``text`` cannot be encoded, said in one line (the text itself is not shown whole:
    it may be long, and the terminal could not show the character either)."""
    return f"it holds the lone surrogate {text[exc.start]!r} at index {exc.start}"


def validate_name(name: Any, what: str) -> str:
    """``name`` (of a signal, update, query) if it is a non-empty string that UTF-8 can encode."""
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{what} needs a non-empty name, not {name!r}")
    if not name.isascii():  # the common case costs one scan, no encode
        try:
            name.encode()
        except UnicodeEncodeError as exc:
            raise InvalidRequest(f"{what} name must be valid Unicode text: {_surrogate(name, exc)}") from None
    return name


def check_seconds(value: Any, what: str) -> float:
    """``value`` as a float if it is a real number of seconds in ``[0, MAX_SECONDS]``: NaN,
    infinities, negatives and absurd lengths are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidRequest(f"{what} must be a number of seconds, not {value!r}")
    seconds = float(value)
    if not 0.0 <= seconds <= MAX_SECONDS:  # False for NaN too
        raise InvalidRequest(f"{what} must be between 0 and {MAX_SECONDS:.0f} seconds, not {value!r}")
    return seconds


def check_instant(value: Any, what: str) -> float:
    """``value`` as a float if it is a finite epoch time no later than ``MAX_INSTANT``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidRequest(f"{what} must be a time in epoch seconds, not {value!r}")
    at = float(value)
    if not math.isfinite(at) or not -MAX_INSTANT <= at <= MAX_INSTANT:
        raise InvalidRequest(f"{what} must be a finite epoch time before year 10000, not {value!r}")
    return at


def check_priority(priority: Any) -> int:
    """``priority`` if it is an int (not a bool) from ``MIN_PRIORITY`` to ``MAX_PRIORITY``."""
    if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidRequest(f"priority must be an int from {MIN_PRIORITY} to {MAX_PRIORITY}, not {priority!r}")
    return priority
