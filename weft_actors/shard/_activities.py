"""Running activities: ``async def`` inline on the loop, plain functions in a bounded pool.

An async activity is first driven inline with ``send(None)``; most finish without suspending,
and then no Task or Future is made at all. Only one that really suspends gets a Task.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Coroutine, Generator

from ..codec import decode_args
from ..workflow import ActivityDefinition, ActivityInfo, current_activity

__all__ = ["ActivityRunner"]

Done = Callable[[Any, BaseException | None], None]


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], first: Any) -> Generator[Any, Any, Any]:
    """Continue a coroutine that already yielded ``first`` under a Task."""
    yielded = first
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:  # cancellation and throws go to the activity
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value


async def _finish(coro: Coroutine[Any, Any, Any], first: Any) -> Any:
    return await _resume(coro, first)


class ActivityRunner:
    """Starts attempts and reports each outcome once through ``done(value, error)``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_threads: int) -> None:
        self._loop = loop
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="weft-activity")
        self.tasks: set[asyncio.Task[Any]] = set()
        self.started = 0

    def run(self, definition: ActivityDefinition, args: bytes, info: ActivityInfo, timeout: float | None, done: Done) -> Callable[[], None]:
        """Start one attempt; return a function that cancels it (best effort for threads)."""
        self.started += 1
        try:
            values = decode_args(args)
        except Exception as exc:
            done(None, exc)
            return _noop
        if definition.is_async:
            return self._run_async(definition, values, info, timeout, done)
        return self._run_thread(definition, values, info, timeout, done)

    def _run_async(self, definition: ActivityDefinition, values: tuple[Any, ...], info: ActivityInfo, timeout: float | None, done: Done) -> Callable[[], None]:
        token = current_activity.set(info)
        try:
            coro = definition.fn(*values)
            first = coro.send(None)
        except StopIteration as stop:
            done(stop.value, None)
            return _noop
        except BaseException as exc:
            done(None, exc)
            return _noop
        finally:
            current_activity.reset(token)
        context = contextvars.copy_context()
        context.run(current_activity.set, info)
        task = context.run(self._loop.create_task, _finish(coro, first))
        self.tasks.add(task)
        timer = None if timeout is None else self._loop.call_later(timeout, task.cancel, "start_to_close")

        def finished(task: asyncio.Task[Any]) -> None:
            self.tasks.discard(task)
            if timer is not None:
                timer.cancel()
            if task.cancelled():
                done(None, TimeoutError(f"activity {definition.name!r} exceeded start_to_close={timeout}s") if timeout is not None else asyncio.CancelledError())
                return
            error = task.exception()
            done(task.result() if error is None else None, error)

        task.add_done_callback(finished)
        return task.cancel

    def _run_thread(self, definition: ActivityDefinition, values: tuple[Any, ...], info: ActivityInfo, timeout: float | None, done: Done) -> Callable[[], None]:
        context = contextvars.copy_context()
        context.run(current_activity.set, info)
        future = self._loop.run_in_executor(self._pool, context.run, definition.fn, *values)
        state = {"open": True}

        def report(value: Any, error: BaseException | None) -> None:
            if state["open"]:
                state["open"] = False
                done(value, error)

        def expire() -> None:
            report(None, TimeoutError(f"activity {definition.name!r} exceeded start_to_close={timeout}s"))

        timer = None if timeout is None else self._loop.call_later(timeout, expire)

        def finished(future: asyncio.Future[Any]) -> None:
            if timer is not None:
                timer.cancel()
            if future.cancelled():
                report(None, asyncio.CancelledError())
                return
            error = future.exception()
            report(future.result() if error is None else None, error)

        future.add_done_callback(finished)

        def cancel() -> None:
            state["open"] = False
            future.cancel()

        return cancel

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _noop() -> None:
    return None
