"""A deterministic event loop per simulated engine process, on the simulation's clock.

Each engine gets its own ``SimLoop``: inside one loop callbacks run first in, first out, as on
a real loop, but nothing runs by itself. The scheduler (``_world``) picks which loop runs its
next callback, moves due timers to the ready queue when it advances the clock, and simply stops
running a loop to stall or kill its engine. ``time()`` is the clock's monotonic time, so
``call_later``, ``asyncio.sleep`` and ``wait_for`` all run on simulated time.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
from asyncio import events
from typing import Any, Callable

from weft_actors.testing import FakeClock

__all__ = ["SimClock", "SimLoop", "SimDeath"]


class SimDeath(BaseException):
    """Raised inside an engine's callback to end its process at that instant (nothing after it
    runs: no ``finally`` of the engine's own reaches the store, no callback is called back)."""


class SimClock(FakeClock):
    """``FakeClock`` with a wall clock that can jump on its own (NTP, a VM resumed): ``now()``
    moves by ``jump`` while ``monotonic()`` does not."""

    def jump(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the simulation only jumps the wall clock forward")
        self._now += seconds


class SimLoop(asyncio.BaseEventLoop):
    """An asyncio loop that runs one callback at a time when told to (``run_one``)."""

    def __init__(self, clock: SimClock, name: str) -> None:
        super().__init__()
        self._sim_clock = clock
        self.name = name
        self.errors: list[str] = []
        """Exceptions that escaped a callback."""
        self.late_errors: list[str] = []

    # -- what asyncio needs ---------------------------------------------------------------

    def time(self) -> float:
        return self._sim_clock.monotonic()

    def _process_events(self, event_list: Any) -> None:  # no selector: nothing to process
        pass

    def _write_to_self(self) -> None:
        pass

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any, context: Any = None) -> asyncio.Handle:
        return self.call_soon(callback, *args, context=context)

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> Any:
        raise RuntimeError("the simulation runs async activities only")

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        # Reported by the garbage collector, at no fixed point of the run: kept apart from
        # ``errors`` (which go into the trace) and looked at once the run has ended. A pending
        # task destroyed with a discarded loop (a killed engine's) is expected.
        message = str(context.get("message"))
        if not message.startswith("Task was destroyed but it is pending"):
            self.late_errors.append(f"{message}: {context.get('exception')!r}")

    # -- what the scheduler uses ----------------------------------------------------------

    def has_ready(self) -> bool:
        return bool(self._ready)

    def next_timer(self) -> float | None:
        """When the earliest live timer is due (loop time), or None."""
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            self._timer_cancelled_count = max(0, self._timer_cancelled_count - 1)
        return scheduled[0]._when if scheduled else None

    def release_due(self) -> None:
        """Move every timer due by now to the ready queue, in due order."""
        now = self.time()
        scheduled = self._scheduled
        while scheduled and (scheduled[0]._cancelled or scheduled[0]._when <= now):
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            if handle._cancelled:
                self._timer_cancelled_count = max(0, self._timer_cancelled_count - 1)
            else:
                self._ready.append(handle)

    def run_one(self) -> str | None:
        """Run the oldest ready callback; returns its name (for the trace), None if none was
        ready. ``SimDeath`` propagates; any other exception is noted in ``errors``."""
        while self._ready:
            handle = self._ready.popleft()
            if handle._cancelled:
                continue
            callback = handle._callback
            name = getattr(callback, "__qualname__", None) or type(callback).__name__
            previous = events._get_running_loop()
            events._set_running_loop(self)
            try:
                handle._context.run(callback, *handle._args)
            except SimDeath:
                raise
            except (Exception, SystemExit) as exc:  # an engine callback must never let one escape
                self.errors.append(f"callback {name} raised {exc!r}")
            finally:
                events._set_running_loop(previous)
            return name
        return None

    def discard(self) -> None:
        """The process is gone: drop every pending callback and timer without running them.

        A future whose exception a pending wakeup was about to deliver (a task awaiting it) is
        marked retrieved: that task would have taken it had the process lived, and a real
        process that dies says nothing of it. An exception nobody was woken for is still
        reported ("never retrieved") when the future is collected. A task whose first step was
        pending has its coroutine closed: it never began, and a dead process does not warn that
        it was "never awaited" either."""
        for handle in self._ready:
            for arg in handle._args or ():
                if isinstance(arg, asyncio.Future) and arg.done() and not arg.cancelled():
                    arg.exception()
            _close_unstarted(handle._callback)
            handle.cancel()
        self._ready.clear()
        for handle in self._scheduled:
            handle._scheduled = False
        self._scheduled.clear()


def _close_unstarted(callback: Any) -> None:
    """Close the coroutine of the task whose pending step ``callback`` is, if it never began."""
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            coro.close()
