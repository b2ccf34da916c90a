"""What ``describe()`` adds to an op of its history beyond its kind and times: the payloads
a person debugging it asks for, and a neutral outcome for ops a combinator stopped.

Payloads: a signal's (``wait_signal``'s value, a signal handler's argument), an update's
arguments and its result. They are decoded here, or, for an answer that travels
(``encoded``), left as codec bytes for the receiver to decode (``bus``): a type it does not
know then costs it that payload, not the answer. A payload this process cannot decode is
``None`` with a ``<field>_error`` beside it; one over ``PAYLOAD_SHOWN`` bytes is ``None``
with its size as ``<field>_omitted`` (``_describe_bounds``).

Race losers: an op ``race`` stopped because a sibling won (``lost the race``), or ``all``
stopped because a sibling failed, ends with a ``CancelledError`` record. That is the
combinator working, not a failure: its outcome is ``lost_race`` (or ``cancelled``) and it
carries no error, so no view paints it as one (a schedule's loop races its timer against
its inbox every turn).
"""

from __future__ import annotations

from typing import Any, Final

from ..codec import try_decode
from ..workflow import HANDLER, UPDATE
from ._describe_bounds import PAYLOAD_SHOWN

__all__ = ["op_payloads", "stopped_outcome", "LOST_RACE"]

LOST_RACE: Final = "lost_race"
_STOPPED: Final = {"lost the race": LOST_RACE, "a sibling failed": "cancelled"}
"""The messages ``workflow._combinators`` stops an op with, and the outcome each shows as."""


def _field(name: str, data: Any, encoded: bool) -> dict[str, Any]:
    if isinstance(data, bytes) and len(data) > PAYLOAD_SHOWN:  # not read: its size is shown instead
        return {name: None, f"{name}_omitted": len(data)}
    if data is None or encoded:
        return {name: data}
    value, error = try_decode(data, f"{name} of an op")
    return {name: value} if error is None else {name: None, f"{name}_error": error}


def op_payloads(op: dict[str, Any], encoded: bool) -> dict[str, Any]:
    """The payload fields of op record ``op`` (empty for kinds that carry none)."""
    kind = op.get("kind")
    if kind == UPDATE:
        found = _field("args", op.get("args"), encoded)
        if "ok" in op:
            found.update(_field("result", op["ok"], encoded))
        return found
    if (kind == HANDLER or kind == "signal") and "ok" in op:
        return _field("payload", op["ok"], encoded)
    return {}


def stopped_outcome(error: dict[str, Any]) -> str | None:
    """``lost_race`` or ``cancelled`` for an op record's error that says a combinator stopped
    the op, else None (a real failure)."""
    if error.get("kind") != "cancelled" or error.get("type") != "CancelledError":
        return None
    return _STOPPED.get(str(error.get("message")))
