"""Bounds on a ``describe()`` answer: whatever the workflow holds, the answer stays about a
megabyte at most besides its input, result and memo (each already under the payload limit).

A workflow may await ten thousand ops at once (``ctx.all`` over a list), retry a hundred
activities that fail with long messages, or have taken signals of a megabyte each: listed
whole, its answer would be tens of megabytes, built in the shard's memory, sent through its
pipe and the front door, and rendered by the console, for a reader who looks at the first
screen. So each list keeps what a person reads first and says how much it left out
(``<list>_omitted``): the newest ops of the history (within ``HISTORY_BUDGET`` bytes), the
earliest timers and inbox messages, the first pending activities and awaited ops, the
innermost frames; long texts keep their start (a message) or their end (a traceback, where the
raise is). The payload of one op is cut where it is read (``_describe_ops``).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["bound_described", "cut_text", "LISTED", "PENDING_SHOWN", "HISTORY_BUDGET", "PAYLOAD_SHOWN"]

LISTED: Final = 1000
"""History entries, timers and inbox messages an answer lists at most."""
PENDING_SHOWN: Final = 100
"""Pending activities, and ops one frame awaits, an answer lists at most."""
FRAMES_SHOWN: Final = 100
"""Frames of the stack (the innermost, where it waits) an answer lists at most."""
HISTORY_BUDGET: Final = 256 * 1024
"""About the bytes of history an answer carries (the newest ops that fit)."""
PAYLOAD_SHOWN: Final = 2048
"""Bytes (encoded) of one op's payload an answer carries; a larger one is ``<field>_omitted``."""
MESSAGE_SHOWN: Final = 1000
TRACEBACK_SHOWN: Final = 3000


def cut_text(text: Any, limit: int, keep_end: bool = False) -> Any:
    """``text`` if it is no string or at most ``limit`` characters, else its start (or its
    end) with how much was cut."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"[{cut} characters cut]...{text[-limit:]}" if keep_end else f"{text[:limit]}...[{cut} characters cut]"


def _error(error: Any) -> Any:
    if not isinstance(error, dict):
        return error
    bounded = dict(error)
    bounded["message"] = cut_text(error.get("message"), MESSAGE_SHOWN)
    if "traceback" in error:
        bounded["traceback"] = cut_text(error.get("traceback"), TRACEBACK_SHOWN, keep_end=True)
    return bounded


def _first(described: dict[str, Any], key: str, limit: int) -> None:
    items = described.get(key)
    if isinstance(items, list) and len(items) > limit:
        described[f"{key}_omitted"] = len(items) - limit
        described[key] = items[:limit]


def _size(entry: dict[str, Any]) -> int:
    """About the bytes ``entry`` (a history op) takes in an answer."""
    size = 200
    for field in ("payload", "args", "result"):
        value = entry.get(field)
        size += len(value) if isinstance(value, (bytes, str)) else PAYLOAD_SHOWN if value is not None else 0
    error = entry.get("error")
    if isinstance(error, dict):
        size += len(str(error.get("message")))
    return size


def _newest_history(described: dict[str, Any]) -> None:
    history = described.get("history")
    if not isinstance(history, list):
        return
    kept, used = 0, 0
    for entry in reversed(history):
        if kept == LISTED:
            break
        entry["error"] = _error(entry["error"]) if "error" in entry else None
        if entry["error"] is None:
            del entry["error"]
        used += _size(entry)
        if used > HISTORY_BUDGET and kept:
            break
        kept += 1
    if kept < len(history):
        described["history_omitted"] = len(history) - kept
        described["history"] = history[len(history) - kept:]


def _stack(stack: Any) -> Any:
    if not isinstance(stack, list):
        return stack
    for frame in stack:
        waits = frame.get("waits_on")
        if isinstance(waits, list) and len(waits) > PENDING_SHOWN:
            frame["waits_on_omitted"] = len(waits) - PENDING_SHOWN
            frame["waits_on"] = waits[:PENDING_SHOWN]
    return stack[-FRAMES_SHOWN:]


def bound_described(described: dict[str, Any]) -> dict[str, Any]:
    """``described`` (a ``describe()`` answer) within the bounds above, in place."""
    _newest_history(described)
    _first(described, "timers", LISTED)
    _first(described, "inbox", LISTED)
    _first(described, "pending_activities", PENDING_SHOWN)
    for entry in described.get("pending_activities") or ():
        if entry.get("last_failure") is not None:
            entry["last_failure"] = _error(entry["last_failure"])
    stack = described.get("stack")
    if isinstance(stack, list) and len(stack) > FRAMES_SHOWN:
        described["stack_frames_omitted"] = len(stack) - FRAMES_SHOWN
    described["stack"] = _stack(stack)
    return described
