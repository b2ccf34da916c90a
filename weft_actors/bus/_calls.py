"""Client calls without I/O: each public method becomes a ``Call`` (op, fields, parser).

``Client`` and ``AsyncClient`` differ only in how they move frames; building requests and
reading replies lives here once, so both raise the same errors from the same checks. Every
user value is codec-encoded while the ``Call`` is built, so a ``SerializationError`` reaches
the caller before anything is sent.

So does the failover policy of a client given several endpoints (``endpoint_list``): which
failures move it to the next supervisor (``Unanswered``, ``unserved``) and which calls may
then be sent again (``resendable``). Every supervisor on a shared store serves every
workflow, so another one can answer whatever the first was asked.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import os
import socket
import uuid
from typing import Any, Callable, Final, NamedTuple, Sequence

from .._checks import check_instant, check_priority, check_seconds, not_text, validate_id, validate_name
from ..codec import decode, encode, encode_args, try_decode_args
from ..errors import InvalidRequest, OutcomeUnknown, PayloadTooLarge, ServerUnavailable, UnknownWorkflowType, from_wire
from ._described import decode_payloads
from ._protocol import encode_envelope

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
    "TRANSPORTS",
    "endpoint_list",
    "RESENDABLE_READS",
    "resendable",
    "Unanswered",
    "unserved",
    "give_up_or_go_on",
    "unavailable_everywhere",
]

MAX_RESULT_WAIT: Final = 30.0
"""Longest a single ``result`` request asks the server to hold it; longer waits loop."""

MAX_REQUEST_BYTES: Final = 64 << 20
"""The largest request a client sends: a bigger one is refused here, at once. The front door
drops the connection of a request over twice its own largest (``part_cap``: 2.1 MiB with the
default payload limit) without a reply; one between its limit and that gets its
``PayloadTooLarge`` reply."""

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


def signal_call(wid: str, name: str, payload: Any = None, request_id: str | None = None) -> Call:
    """A missing ``request_id`` is generated here, once: a repeat of this call (after a
    failover) is dropped by the store, so the signal arrives once."""
    fields = {
        "wid": validate_id(wid),
        "name": validate_name(name, "a signal"),
        "payload": encode(payload, "signal payload"),
        "request_id": validate_id(request_id, "a request id") if request_id is not None else uuid.uuid4().hex,
    }
    return Call("signal", fields, _none)


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


def lift_quarantine_call(wid: str, reason: str | None = None, by: str | None = None) -> Call:
    """``by``: who lifts it, kept with the workflow (default: this client's user and host)."""
    return Call("lift_quarantine", _compact(wid=wid, reason=reason, by=by or _caller()), _none)


def _caller() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = str(os.getuid())
    return f"client {user}@{socket.gethostname()}"


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
    if isinstance(described, dict) and described.pop("payloads_encoded", False):
        decode_payloads(described)
    return described


def list_call(
    status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None, memo: dict[str, Any] | None = None
) -> Call:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidRequest(f"limit must be a positive integer, not {limit!r}")
    if memo is not None and not _plain_memo_filter(memo):
        raise InvalidRequest(f"a memo filter is a mapping of memo key (str) to a str, int or bool value, not {memo!r}")
    return Call("list", _compact(status=status, type=type, limit=limit, cursor=cursor, memo_filter=memo))


def _plain_memo_filter(memo: Any) -> bool:
    """What the wire can carry as a filter; its bounds are the server's to check (``invalid_request``)."""
    return isinstance(memo, dict) and all(
        isinstance(key, str) and (isinstance(value, (str, bool)) or (isinstance(value, int) and -(1 << 63) <= value < 1 << 64))
        for key, value in memo.items()
    )


def stats_call() -> Call:
    return Call("stats", {})


def shards_call(action: str, count: int | None = None) -> Call:
    """``shards``: the supervisor's shards (``list``), a rolling restart (``restart``) or a
    resize (``set``, ``count``); admin-only under CURVE."""
    return Call("shards", _compact(action=action, count=count))


def ping_call() -> Call:
    return Call("ping", {})


def frame(request_id: str, call: Call) -> bytes:
    """The request frame. Built here rather than with ``encode_request(request_id, op, **fields)``
    because ``update`` has a field named ``request_id`` that would collide with that parameter."""
    try:
        data = encode_envelope(request_id, call.op, call.fields)
    except UnicodeEncodeError:
        raise not_text(call.op, call.fields) from None
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


# -- several endpoints: the failover policy ---------------------------------------------------

TRANSPORTS: Final = ("tcp://", "ipc://", "inproc://", "pgm://", "epgm://", "vmci://", "ws://", "wss://")
"""How a ZeroMQ endpoint begins."""

RESENDABLE_READS: Final = frozenset({"result", "query", "describe", "list", "stats", "ping", "directory"})
"""Ops that change nothing: asking another supervisor again is always safe."""


def endpoint_list(endpoint: str | Sequence[str]) -> tuple[str, ...]:
    """The supervisors a client may ask, in the order it tries them: one endpoint, a list or
    tuple of them, or one string of several joined by commas (how ``--endpoint`` and
    ``WEFT_ENDPOINT`` carry them). A string is split only when every piece names a transport,
    so a lone ``ipc://`` path holding a comma stays whole."""
    if isinstance(endpoint, str):
        pieces = tuple(piece.strip() for piece in endpoint.split(","))
        if len(pieces) > 1 and all(piece.startswith(TRANSPORTS) for piece in pieces):
            return pieces
        return (endpoint,)
    endpoints = tuple(endpoint)
    if not endpoints or not all(isinstance(item, str) and item for item in endpoints):
        raise ValueError(f"endpoints must be one or more non-empty strings, not {endpoint!r}")
    return endpoints


def resendable(call: Call) -> bool:
    """Whether ``call`` may go to another supervisor after one that may have applied it went
    silent. The front door applies the same rule to a shard lost holding a request
    (``_dispatch.resendable``): reads; an ``update`` or a ``signal``, whose ``request_id``
    (``update_call`` and ``signal_call`` always set one) makes the store drop a repeat (an
    update's returns the recorded answer); a ``start`` or ``execute`` with a fixed id and
    ``if_exists="return"``, whose repeat returns the workflow the first made. Not
    ``signal_with_start``, ``cancel``, ``terminate``, ``lift_quarantine`` (a repeat would fail,
    or act twice), nor another start (a repeat makes a second workflow, or fails as already
    existing)."""
    op = call.op
    if op in RESENDABLE_READS:
        return True
    if op in ("update", "signal"):
        return bool(call.fields.get("request_id"))
    if op in ("start", "execute"):
        return call.fields.get("wid") is not None and call.fields.get("if_exists") == "return"
    return False


class Unanswered(Exception):
    """One attempt at one supervisor got no answer: ``why``, and whether the request may have
    reached it (``delivered``). A request that surely never left (no connection was ever up to
    carry it) may go anywhere else; one that may have arrived only if ``resendable``."""

    def __init__(self, why: str, *, delivered: bool) -> None:
        super().__init__(why)
        self.why = why
        self.delivered = delivered


def unserved(reply: dict[str, Any]) -> str | None:
    """The message of a reply saying that this supervisor has no shard to serve the request
    (``server_unavailable``, after its ``--ready-timeout``), else None. The front door answers
    so only for a request no shard took (or, sent on from a lost shard, a resendable one), so
    another supervisor may be asked whatever the op. Every other error is the answer."""
    error = reply.get("error")
    if isinstance(error, dict) and error.get("code") == ServerUnavailable.code:
        return str(error.get("message") or "no shard ready")
    return None


def give_up_or_go_on(call: Call, endpoint: str, failure: Unanswered, failures: list[str]) -> None:
    """After ``failure`` at ``endpoint``: raise ``OutcomeUnknown`` if the request may have been
    applied there and must not be sent again, else note it in ``failures`` (the caller tries
    the next endpoint)."""
    if failure.delivered and not resendable(call):
        raise OutcomeUnknown(
            f"{call.op}: {failure.why} ({endpoint}); it may or may not have been applied, and a {call.op} "
            "is not sent to another supervisor (reads, updates, signals, and starts with an id and "
            "if_exists='return' are): find out with describe, or retry it idempotently",
            endpoint=endpoint,
            op=call.op,
        )
    failures.append(f"{endpoint}: {failure.why}")


def unavailable_everywhere(call: Call, endpoints: tuple[str, ...], failures: list[str]) -> ServerUnavailable:
    """The error once each endpoint was tried once and none answered (``endpoint``: all of
    them, comma-separated, as they were given)."""
    return ServerUnavailable(f"{call.op}: no supervisor answered ({'; '.join(failures)})", endpoint=",".join(endpoints), op=call.op)
