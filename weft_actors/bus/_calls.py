"""Client calls without I/O: each public method becomes a ``Call`` (op, fields, parser).

``Client`` and ``AsyncClient`` differ only in how they move frames; building requests and
reading replies lives here once, so both raise the same errors from the same checks. Every
user value is codec-encoded while the ``Call`` is built, so a ``SerializationError`` reaches
the caller before anything is sent.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from typing import Any, Callable, Final, NamedTuple

import msgpack

from .._checks import check_instant, check_priority, check_seconds, validate_id, validate_name
from ..codec import decode, encode, encode_args, try_decode_args
from ..errors import InvalidRequest, PayloadTooLarge, UnknownWorkflowType, from_wire
from ._protocol import VERSION

__all__ = [
    "Call",
    "MAX_RESULT_WAIT",
    "MAX_REQUEST_BYTES",
    "IF_EXISTS",
    "start_call",
    "execute_call",
    "signal_call",
    "query_call",
    "update_call",
    "result_call",
    "cancel_call",
    "terminate_call",
    "lift_quarantine_call",
    "describe_call",
    "list_call",
    "stats_call",
    "ping_call",
    "frame",
    "unwrap",
    "result_value",
]

MAX_RESULT_WAIT: Final = 30.0
"""Longest a single ``result`` request asks the server to hold it; longer waits loop."""

MAX_REQUEST_BYTES: Final = 64 << 20
"""The largest request a client sends: the front door drops the connection of a message above
its wire ceiling (64 MiB) without a reply, so a bigger one is refused here, at once, rather
than timing out. (Below it, a request over the server's payload limit gets its
``PayloadTooLarge`` reply.)"""

IF_EXISTS: Final = ("error", "return", "start_new")


def _identity(value: Any) -> Any:
    return value


def _none(value: Any) -> None:
    return None


class Call(NamedTuple):
    """One request to send: ``op`` and its wire ``fields``; ``parse`` turns the reply's ``ok``
    into the caller's value; ``wait`` is how long the server may hold it before answering."""

    op: str
    fields: dict[str, Any]
    parse: Callable[[Any], Any] = _identity
    wait: float = 0.0


def _workflow_name(workflow: Any) -> str:
    if isinstance(workflow, str):
        return workflow
    # The mark @workflow leaves on a function (bus/ does not import the authoring package).
    definition = getattr(workflow, "__weft_workflow__", None)
    if definition is None:
        raise UnknownWorkflowType(f"{workflow!r} is not a @workflow", workflow_type=repr(workflow))
    return definition.name


def _seconds(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return check_seconds(value, name)


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        return value.timestamp()
    return check_instant(value, "start_at")


def _compact(**fields: Any) -> dict[str, Any]:
    # Absent options are left out rather than sent as nil: some (limit, if_exists) must not be nil.
    return {name: value for name, value in fields.items() if value is not None}


def _started(ok: Any) -> tuple[str, str | None]:
    return ok["id"], ok.get("run_id")


def start_call(
    workflow: Any,
    args: tuple[Any, ...],
    *,
    id: str | None = None,
    if_exists: str = "error",
    start_delay: float | _dt.timedelta | None = None,
    start_at: float | _dt.datetime | None = None,
    execution_timeout: float | _dt.timedelta | None = None,
    memo: Any = None,
    priority: int | None = None,
    signal: str | None = None,
    payload: Any = None,
) -> Call:
    """``start``, or ``signal_with_start`` when ``signal`` is given. The workflow id travels as
    ``wid`` (as in every other op) because ``id`` is the request id of the envelope."""
    name = _workflow_name(workflow)
    if if_exists not in IF_EXISTS:
        raise InvalidRequest(f"if_exists must be 'error', 'return' or 'start_new', not {if_exists!r}")
    if id is not None:
        validate_id(id)
    fields = _compact(
        workflow=name,
        args=encode_args(tuple(args), "workflow argument"),
        wid=id,
        if_exists=if_exists,
        memo=None if memo is None else encode(memo, "memo"),
        start_delay=_seconds(start_delay, "start_delay"),
        start_at=_timestamp(start_at),
        execution_timeout=_seconds(execution_timeout, "execution_timeout"),
        priority=None if priority is None else check_priority(priority),
    )
    if signal is None:
        return Call("start", fields, _started)
    fields["signal"] = validate_name(signal, "a signal")
    fields["payload"] = encode(payload, "signal payload")
    return Call("signal_with_start", fields, _started)


def execute_call(workflow: Any, args: tuple[Any, ...], wait: float, **options: Any) -> Call:
    """``start`` and ``result`` in one request: the server starts the workflow and holds the
    reply until it ends or ``wait`` passes. The reply carries ``id`` and ``run_id`` too, so a
    caller whose wait ran out goes on with ``result``."""
    start = start_call(workflow, args, **options)
    wait = max(0.0, min(wait, MAX_RESULT_WAIT))
    return Call("execute", {**start.fields, "wait": wait}, _identity, wait)


def signal_call(wid: str, name: str, payload: Any = None) -> Call:
    return Call("signal", {"wid": validate_id(wid), "name": validate_name(name, "a signal"), "payload": encode(payload, "signal payload")}, _none)


def query_call(wid: str, name: str, args: tuple[Any, ...]) -> Call:
    fields = {"wid": validate_id(wid), "name": validate_name(name, "a query"), "args": encode_args(tuple(args), "query argument")}
    return Call("query", fields, lambda ok: decode(ok, "query result"))


def update_call(wid: str, name: str, args: tuple[Any, ...], request_id: str | None = None) -> Call:
    """A missing ``request_id`` is generated here, once, so retries of this call stay idempotent."""
    fields = {
        "wid": validate_id(wid),
        "name": validate_name(name, "an update"),
        "args": encode_args(tuple(args), "update argument"),
        "request_id": validate_id(request_id, "a request id") if request_id is not None else uuid.uuid4().hex,
    }
    return Call("update", fields, lambda ok: decode(ok, "update result"))


def result_call(wid: str, wait: float) -> Call:
    wait = max(0.0, min(wait, MAX_RESULT_WAIT))
    return Call("result", {"wid": validate_id(wid), "wait": wait}, _identity, wait)


def result_value(ok: Any) -> tuple[bool, Any]:
    """``(True, value)`` once the reply says completed, ``(False, None)`` while it runs."""
    if isinstance(ok, dict) and ok.get("status") == "completed":
        return True, decode(ok["result"], "workflow result")
    return False, None


def cancel_call(wid: str) -> Call:
    return Call("cancel", {"wid": validate_id(wid)}, _none)


def terminate_call(wid: str, reason: str | None = None) -> Call:
    return Call("terminate", _compact(wid=validate_id(wid), reason=reason), _none)


def lift_quarantine_call(wid: str) -> Call:
    return Call("lift_quarantine", {"wid": wid}, _none)


def describe_call(wid: str) -> Call:
    return Call("describe", {"wid": validate_id(wid)}, _described)


def _described(ok: bytes) -> dict[str, Any]:
    """A describe answer, its input (sent as codec bytes, ``input_encoded``) decoded here: to
    ``None`` and an ``input_error`` if its types are not registered in this process."""
    described: Any = decode(ok, "describe")
    if isinstance(described, dict) and described.pop("input_encoded", False):
        described["input"], error = try_decode_args(described["input"], "workflow arguments")
        if error is not None:
            described["input_error"] = error
    return described


def list_call(status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None) -> Call:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidRequest(f"limit must be a positive integer, not {limit!r}")
    return Call("list", _compact(status=status, type=type, limit=limit, cursor=cursor))


def stats_call() -> Call:
    return Call("stats", {})


def ping_call() -> Call:
    return Call("ping", {})


def frame(request_id: str, call: Call) -> bytes:
    """The request frame. Built here rather than with ``encode_request(request_id, op, **fields)``
    because ``update`` has a field named ``request_id`` that would collide with that parameter."""
    data = msgpack.packb({**call.fields, "v": VERSION, "id": request_id, "op": call.op}, use_bin_type=True)
    if len(data) > MAX_REQUEST_BYTES:
        raise PayloadTooLarge(
            f"{call.op} request of {len(data)} bytes exceeds the largest a client sends ({MAX_REQUEST_BYTES})",
            size=len(data),
            limit=MAX_REQUEST_BYTES,
        )
    return data


def unwrap(call: Call, reply: dict[str, Any]) -> Any:
    """The caller's value from ``reply``; an error reply raises the same ``WeftError`` class
    the embedded engine would have raised."""
    error = reply.get("error")
    if error is not None:
        raise from_wire(error if isinstance(error, dict) else {"code": "weft_error", "message": str(error)})
    return call.parse(reply.get("ok"))
