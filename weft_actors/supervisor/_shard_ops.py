"""Protocol ops served by a shard, each mapped onto the embedded Engine's API."""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable

from ..codec import decode, decode_args, encode
from ..errors import EngineStopped, InvalidRequest
from ..shard import Engine, call_reply
from ._moved import moved

__all__ = ["ShardOps"]

MAX_RESULT_WAIT = 60.0

_RARE_PLAIN = ("start_delay", "start_at", "execution_timeout", "priority", "traceparent")
"""A start's options besides ``if_exists`` carried as they are (``memo`` is decoded)."""
_RARE = frozenset((*_RARE_PLAIN, "memo"))


class ShardOps:
    """``dispatch(request)`` runs one decoded request against the engine; user values arrive
    and leave codec-encoded."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.moves_waits = True
        """A wait on a run this engine hands off is answered ``WorkflowMoved`` (``_moved``);
        False once the whole supervisor stops (no shard of its front door is left to ask)."""
        self._ops: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "start": self.start,
            "execute": self.execute,
            "signal_with_start": self.signal_with_start,
            "signal": self.signal,
            "query": self.query,
            "update": self.update,
            "result": self.result,
            "cancel": self.cancel,
            "terminate": self.terminate,
            "lift_quarantine": self.lift_quarantine,
            "describe": self.describe,
            "list": self.list,
            "stats": self.stats,
            "ping": self.ping,
        }

    async def dispatch(self, request: dict[str, Any]) -> Any:
        return await self._ops[request["op"]](request)

    def start_options(self, request: dict[str, Any]) -> dict[str, Any]:
        options: dict[str, Any] = {"id": request.get("wid")}
        if_exists = request.get("if_exists")  # a client sends it always
        if if_exists is not None:
            options["if_exists"] = if_exists
        if _RARE.isdisjoint(request):
            return options  # the common start: one set test instead of six lookups
        for name in _RARE_PLAIN:
            if request.get(name) is not None:
                options[name] = request[name]
        if request.get("memo") is not None:
            options["memo"] = decode(request["memo"], "memo")
        return options

    async def start(self, request: dict[str, Any]) -> dict[str, Any]:
        handle = await self.engine.start(request["workflow"], *decode_args(request["args"]), **self.start_options(request))
        return {"id": handle.id, "run_id": handle.run_id}

    async def execute(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """``start``, then ``result`` on the same shard (which holds the new workflow)."""
        started = await self.start(request)
        reply = call_reply.get()
        if reply is not None:
            reply.started = started  # type: ignore[attr-defined]  # a ``LaterReply``
        outcome = await self.result({"wid": started["id"], "wait": request.get("wait")}, started)
        return outcome if outcome is None else {**started, **outcome}

    async def signal_with_start(self, request: dict[str, Any]) -> dict[str, Any]:
        method = self._engine_method("signal_with_start")
        handle = await method(
            request["workflow"],
            *decode_args(request["args"]),
            signal=request["signal"],
            payload=decode(request["payload"], "signal payload"),
            **self.start_options(request),
        )
        return {"id": handle.id, "run_id": handle.run_id}

    async def signal(self, request: dict[str, Any]) -> None:
        await self.engine.signal(request["wid"], request["name"], decode(request["payload"], "signal payload"), request_id=request.get("request_id"))

    async def query(self, request: dict[str, Any]) -> bytes:
        value = await self.engine.query(request["wid"], request["name"], *decode_args(request["args"], "query argument"))
        return encode(value, "query result")

    async def update(self, request: dict[str, Any]) -> bytes | None:
        method = self._engine_method("update")
        value = await method(request["wid"], request["name"], *decode_args(request["args"], "update argument"), request_id=request.get("request_id"))
        reply = call_reply.get()
        if reply is not None and reply.sent:
            return None  # the answering commit's pass replied already
        return encode(value, "update result")

    async def result(self, request: dict[str, Any], started: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``started``: the handle of the run an ``execute`` started (its wait, if the engine
        hands the run off meanwhile, goes on at the new owner: ``_moved``)."""
        wait = request.get("wait")
        wait = MAX_RESULT_WAIT if wait is None else max(0.0, min(float(wait), MAX_RESULT_WAIT))
        began = time.monotonic()
        try:
            value = await self.engine.result(request["wid"], timeout=wait)
        except TimeoutError:
            return {"status": "running"}
        except EngineStopped as error:
            raise moved(self, error, request["wid"], wait - (time.monotonic() - began), started) from None
        reply = call_reply.get()
        if reply is not None and reply.sent:
            return None  # the ending commit's pass replied already
        return {"status": "completed", "result": encode(value, "workflow result")}

    async def cancel(self, request: dict[str, Any]) -> None:
        await self._engine_method("cancel")(request["wid"])

    async def terminate(self, request: dict[str, Any]) -> None:
        await self._engine_method("terminate")(request["wid"], request.get("reason"))

    async def lift_quarantine(self, request: dict[str, Any]) -> None:
        await self._engine_method("lift_quarantine")(request["wid"], request.get("reason"), request.get("by"))

    async def describe(self, request: dict[str, Any]) -> bytes:
        """The input travels as its own codec bytes: the client decodes it apart from the rest,
        so a type it does not know costs it the input, not the answer."""
        return encode(await self.engine.describe(request["wid"], input_encoded=True), "describe")

    async def list(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self.engine.list(request.get("status"), request.get("type"), request.get("limit", 100), request.get("cursor"), request.get("memo_filter"))

    async def stats(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.engine.stats()

    async def ping(self, request: dict[str, Any]) -> str:
        return "pong"

    def _engine_method(self, name: str) -> Any:
        method = getattr(self.engine, name, None)
        if method is None:
            raise InvalidRequest(f"op {name!r} is not supported by this engine")
        return method
