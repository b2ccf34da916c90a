"""``WorkflowHandle``: the embedded engine's handle on one workflow id."""

from __future__ import annotations

from typing import Any, Coroutine, Protocol

from ..workflow import stack_answer

__all__ = ["WorkflowHandle"]


class Calls(Protocol):
    """What a handle needs of its engine: the per-workflow client calls, nothing more (the
    engine above satisfies it; declared here so this file never imports the engine)."""

    async def signal(self, workflow_id: str, name: str, payload: Any = None, *, request_id: str | None = None) -> None: ...

    async def query(self, workflow_id: str, name: str, *args: Any) -> Any: ...

    async def result(self, workflow_id: str, timeout: float | None = None) -> Any: ...

    async def describe(self, workflow_id: str, *, input_encoded: bool = False) -> dict[str, Any]: ...

    async def update(self, workflow_id: str, name: str, *args: Any, request_id: str | None = None) -> Any: ...

    async def cancel(self, workflow_id: str) -> None: ...

    async def terminate(self, workflow_id: str, reason: str | None = None) -> None: ...

    async def lift_quarantine(self, workflow_id: str, reason: str | None = None, by: str | None = None) -> None: ...


class WorkflowHandle:
    """Made by ``Engine.start``/``Engine.get_handle``; no public constructor. Holding one does
    no I/O; each method does its own."""

    __slots__ = ("_engine", "id", "run_id")

    def __init__(self, engine: Calls, workflow_id: str, run_id: str | None = None) -> None:
        self._engine = engine
        self.id = workflow_id
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.id!r}>"

    async def signal(self, name: str, payload: Any = None, *, request_id: str | None = None) -> None:
        """Append a signal to the durable inbox; returns once it is committed. The same
        ``request_id`` twice is delivered once."""
        await self._engine.signal(self.id, name, payload, request_id=request_id)

    async def query(self, name: str, *args: Any) -> Any:
        return await self._engine.query(self.id, name, *args)

    def result(self, timeout: float | None = None) -> Coroutine[Any, Any, Any]:
        """The workflow's result, awaited; raises ``WorkflowFailed`` & co. for other endings and
        ``TimeoutError`` if it does not end within ``timeout`` seconds. (The engine's own
        coroutine, handed out as it is: one frame less for every caller.)"""
        return self._engine.result(self.id, timeout)

    async def describe(self) -> dict[str, Any]:
        return await self._engine.describe(self.id)

    async def stack(self) -> list[dict[str, Any]]:
        """Where the running workflow waits (``describe()["stack"]``); ``WorkflowClosed`` once
        it has ended, ``InvalidRequest`` while none of its code runs."""
        return stack_answer(await self._engine.describe(self.id))

    async def update(self, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Apply update ``name(*args)`` and return the handler's result; the same
        ``request_id`` applied twice runs the handler once (see ``Engine.update``)."""
        return await self._engine.update(self.id, name, *args, request_id=request_id)

    async def cancel(self) -> None:
        """Request cancellation; the workflow sees ``CancelledError`` at its current await."""
        await self._engine.cancel(self.id)

    async def terminate(self, reason: str | None = None) -> None:
        """End the workflow at once, whichever engine owns it (see ``Engine.terminate``)."""
        await self._engine.terminate(self.id, reason)

    async def lift_quarantine(self, reason: str | None = None, *, by: str | None = None) -> None:
        """Let a quarantined workflow run again (see ``Engine.lift_quarantine``)."""
        await self._engine.lift_quarantine(self.id, reason, by)
