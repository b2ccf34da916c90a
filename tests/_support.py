"""Shared test helpers (importable as `_support`: pyproject puts tests/ on the path)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable


def run(coro: Awaitable[Any]) -> Any:
    """Run one coroutine on a fresh event loop (no pytest-asyncio dependency)."""
    return asyncio.run(coro)  # type: ignore[arg-type]


async def eventually(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Wait until ``predicate()`` is truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
