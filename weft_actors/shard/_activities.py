"""Running activities: ``async def`` inline on the loop, plain functions in a bounded pool.

An async activity is first driven inline with ``send(None)``; most finish without suspending,
and then no Task, Future or callback is made at all: ``run`` hands back ``Finished``. Only one
that really suspends gets a Task.

At most ``max_inflight`` attempts run at once per engine. Beyond that an attempt waits in a
FIFO queue and starts when a running one ends: backpressure, never a failure. Its
``start_to_close`` clock starts when it starts, not while it queues (``schedule_to_close``,
checked by the actor, counts from the first attempt and does include the wait). A plain
function's call may still wait for a free thread of the pool after it started; if its
``start_to_close`` passes there, it is withdrawn and never runs.

An attempt of an activity with a ``rate_limit`` or ``concurrency`` first waits for a permit
that holds across engines (``_permits``), then for a slot here, like any other.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import types
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Generator, NamedTuple

from ..codec import decode_args
from ..workflow import ActivityDefinition, ActivityInfo, contained, current_activity
from ._permits import PermitGate

if TYPE_CHECKING:
    from .._clock import Clock
    from ..store import LoopSlot
    from ._committer import GroupCommitter
    from ._timers import TimerService

__all__ = ["ActivityRunner", "DecidedFailure", "Finished", "start_to_close_exceeded", "timed_out"]

Done = Callable[[Any, BaseException | None], None]
_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)


class Finished(NamedTuple):
    """What ``run`` returns for an attempt that ended before ``run`` returned."""

    value: Any
    error: BaseException | None


_TIMED_OUT = "weft_start_to_close"
"""The attribute that marks a ``TimeoutError`` as this runner's own (``start_to_close``), not
one the activity raised: the error keeps its plain type, which is what its record shows."""


def start_to_close_exceeded(name: str, timeout: float) -> TimeoutError:
    error = TimeoutError(f"activity {name!r} exceeded start_to_close={timeout}s")
    setattr(error, _TIMED_OUT, timeout)
    return error


def timed_out(error: BaseException) -> bool:
    """Whether ``error`` is an attempt's ``start_to_close`` running out."""
    return getattr(error, _TIMED_OUT, None) is not None


class DecidedFailure(Exception):
    """A failed attempt's outcome as its refused commit recorded it (``_reuse``): handed to
    the actor in place of running the attempt again, with the decision already made then --
    retry at ``retry_at``, or give up (None) with ``failure`` as the op's error record."""

    def __init__(self, failure: dict[str, Any], retry_at: float | None, first_at: float | None) -> None:
        super().__init__(failure.get("message", ""))
        self.failure = failure
        self.retry_at = retry_at
        self.first_at = first_at


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], first: Any, info: ActivityInfo, slot: LoopSlot | None = None) -> Generator[Any, Any, Any]:
    """Continue a coroutine that already yielded ``first`` under a Task. ``SystemExit`` and
    ``KeyboardInterrupt`` from the activity become ``UserCodeExit``: a Task re-raises those two
    out of the event loop, which would end the process instead of the attempt. Being closed
    (a Task collected unfinished) closes the activity and re-raises ``GeneratorExit``, never
    throws it in: the collector may have closed the activity's coroutine already. Each step
    is recorded in the engine's loop slot (``slot``) while it runs: a stall is blamed on it."""
    yielded = first
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # cancellation and throws go to the activity
            if slot is not None:
                slot.current = info
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            except (SystemExit, KeyboardInterrupt) as exit:
                raise contained(exit, f"activity {info.activity!r}") from exit
            finally:
                if slot is not None:
                    slot.current = None
        else:
            if slot is not None:
                slot.current = info
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value
            except (SystemExit, KeyboardInterrupt) as exit:
                raise contained(exit, f"activity {info.activity!r}") from exit
            finally:
                if slot is not None:
                    slot.current = None


async def _finish(coro: Coroutine[Any, Any, Any], first: Any, info: ActivityInfo, slot: LoopSlot | None = None) -> Any:
    # ``info`` is a local of these frames: the loop watchdog finds the activity by it.
    return await _resume(coro, first, info, slot)


def thread_over(loop: asyncio.AbstractEventLoop, permit: Callable[[], None]) -> Callable[[Any], None]:
    """A pool future's done callback (run in the pool's thread, or in the caller of
    ``cancel``) that gives ``permit`` back on the loop. Nothing to give back to a closed
    loop: the engine and its permit gate are gone."""

    def over(_call: Any) -> None:
        try:
            loop.call_soon_threadsafe(permit)
        except RuntimeError:
            pass

    return over


class _Queued:
    """An attempt waiting for a free in-flight slot (or a permit); ``cancel`` is set once it
    has started; ``release`` gives back the concurrency permit it holds, if any (once)."""

    __slots__ = ("definition", "args", "info", "timeout", "done", "cancel", "cancelled", "release")

    def __init__(self, definition: ActivityDefinition, args: bytes, info: ActivityInfo, timeout: float | None, done: Done) -> None:
        self.definition = definition
        self.args = args
        self.info = info
        self.timeout = timeout
        self.done = done
        self.cancel: Callable[[], None] | None = None
        self.cancelled = False
        self.release: Callable[[], None] | None = None

    def keep_permit(self) -> Callable[[], None] | None:
        """Take over the release of this attempt's permit (a thread about to run it gives it
        back when it really ends): reporting or stopping it then releases nothing."""
        release, self.release = self.release, None
        return release

    def stop(self) -> None:
        if self.cancel is not None:
            self.cancel()
        else:
            self.cancelled = True  # dropped when its turn comes; its outcome is never reported
        release = self.release
        if release is not None:
            self.release = None
            release()


class ActivityRunner:
    """Starts attempts and reports each outcome once through ``done(value, error)``.

    ``inflight`` counts the attempts started and not yet reported (or cancelled); ``queued``
    the attempts waiting for one of the ``max_inflight`` slots, started in arrival order, or
    for a permit of their activity's limits (``permits``, set by the engine; without it
    limited activities run unlimited).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_threads: int, max_inflight: int = 1000) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight_activities must be >= 1")
        self._loop = loop
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="weft-activity")
        self.tasks: set[asyncio.Task[Any]] = set()
        self.started = 0
        self.max_inflight = max_inflight
        self.inflight = 0
        self.peak_inflight = 0
        self._queue: collections.deque[_Queued] = collections.deque()
        self._draining = False
        self.permits: PermitGate | None = None
        self.on_loop: LoopSlot | None = None
        """The engine's loop slot (set by the engine when it watches its loop): each piece of
        user code on the loop, activity steps here and workflow turns (``_on_loop``), is
        recorded in it while it runs."""

    def use_permits(self, committer: GroupCommitter, timers: TimerService, clock: Clock) -> None:
        """Enforce activities' ``rate_limit`` and ``concurrency`` through the store."""
        self.permits = PermitGate(self, committer, timers, clock)

    @property
    def queued(self) -> int:
        permits = self.permits
        return len(self._queue) if permits is None else len(self._queue) + permits.waiting

    def run(self, definition: ActivityDefinition, args: bytes, info: ActivityInfo, timeout: float | None, done: Done) -> Callable[[], None] | Finished:
        """Start one attempt, or queue it if ``max_inflight`` run already. Returns ``Finished``
        if it ended inline (``done`` is then never called), else a function that cancels it
        (best effort for threads; a queued attempt is just dropped) and ``done`` is called
        once, later: never from within ``run`` or a cancel function (the slot a cancel frees
        goes to the queue on the next loop turn: a queued attempt that ends inline must not
        report into its caller, an actor in the middle of a step). An attempt of a limited
        activity goes to the permit gate, which starts it once it holds a permit."""
        if definition.limited and self.permits is not None:
            entry = _Queued(definition, args, info, timeout, done)
            self.permits.admit(entry)
            return entry.stop
        if self.inflight >= self.max_inflight or self._queue:  # FIFO: nothing overtakes the queue
            entry = _Queued(definition, args, info, timeout, done)
            self._queue.append(entry)
            return entry.stop
        return self._start(definition, args, info, timeout, done)

    def start_granted(self, entry: _Queued) -> None:
        """Start (or queue for a slot) an attempt the permit gate let through. Never called
        from within an actor's step (the gate calls it after a commit): one that ends inline
        reports through its ``done``, as in ``_drain``."""
        if self.inflight >= self.max_inflight or self._queue:
            self._queue.append(entry)
            return
        self._start_queued(entry)

    def _start_queued(self, entry: _Queued) -> None:
        """Start an attempt that waited, outside any actor's step: one that ends inline
        reports through its ``done``."""
        started = self._start(entry.definition, entry.args, entry.info, entry.timeout, entry.done, entry)
        if started.__class__ is Finished:
            entry.done(*started)  # type: ignore[misc]
        else:
            entry.cancel = started  # type: ignore[assignment]

    def _start(
        self, definition: ActivityDefinition, args: bytes, info: ActivityInfo, timeout: float | None, done: Done, entry: _Queued | None = None
    ) -> Callable[[], None] | Finished:
        self.started += 1
        if self.inflight >= self.peak_inflight:
            self.peak_inflight = self.inflight + 1
        try:
            values = decode_args(args)
        except Exception as exc:
            return _new_tuple(Finished, (None, exc))
        if definition.is_async:
            token = current_activity.set(info)
            on_loop = self.on_loop
            if on_loop is not None:
                on_loop.current = info
            try:
                coro = definition.fn(*values)
                first = coro.send(None)
            except StopIteration as stop:
                return _new_tuple(Finished, (stop.value, None))
            except BaseException as exc:  # even SystemExit: it fails this attempt only
                return _new_tuple(Finished, (None, contained(exc, f"activity {definition.name!r}")))
            finally:
                current_activity.reset(token)
                if on_loop is not None:
                    on_loop.current = None
        # It runs on: it holds an in-flight slot until its outcome is reported or it is cancelled.
        self.inflight += 1
        slot = [True]

        def release(soon: bool = False) -> None:
            if slot[0]:
                slot[0] = False
                self.inflight -= 1
                if self._queue:
                    if soon:
                        self._loop.call_soon(self._drain)
                    else:
                        self._drain()

        def finished(value: Any, error: BaseException | None) -> None:
            try:
                done(value, error)
            finally:
                release()

        if definition.is_async:
            cancel = self._run_suspended(definition, coro, first, info, timeout, finished)
        else:
            cancel = self._run_thread(definition, values, info, timeout, finished, None if entry is None else entry.keep_permit())

        def cancel_and_release() -> None:
            cancel()
            release(True)

        return cancel_and_release

    def _drain(self) -> None:
        """Start queued attempts while slots are free (not re-entered by one that ends inline)."""
        if self._draining:
            return
        self._draining = True
        try:
            queue = self._queue
            while queue and self.inflight < self.max_inflight:
                entry = queue.popleft()
                if not entry.cancelled:
                    self._start_queued(entry)
        finally:
            self._draining = False

    def _run_suspended(self, definition: ActivityDefinition, coro: Coroutine[Any, Any, Any], first: Any, info: ActivityInfo, timeout: float | None, done: Done) -> Callable[[], object]:
        """Go on with an async attempt that suspended (yielding ``first``) under a Task."""
        context = contextvars.copy_context()
        context.run(current_activity.set, info)
        task = context.run(self._loop.create_task, _finish(coro, first, info, self.on_loop))
        self.tasks.add(task)
        timer = None if timeout is None else self._loop.call_later(timeout, task.cancel, "start_to_close")

        def finished(task: asyncio.Task[Any]) -> None:
            self.tasks.discard(task)
            if timer is not None:
                timer.cancel()
            if task.cancelled():
                done(None, start_to_close_exceeded(definition.name, timeout) if timeout is not None else asyncio.CancelledError())
                return
            error = task.exception()
            done(task.result() if error is None else None, error)

        task.add_done_callback(finished)
        return task.cancel

    def _run_thread(
        self, definition: ActivityDefinition, values: tuple[Any, ...], info: ActivityInfo, timeout: float | None, done: Done,
        permit: Callable[[], None] | None = None,
    ) -> Callable[[], None]:
        """Run a plain function in the pool. ``permit`` (the release of a concurrency permit)
        is called once its thread is really done -- returned, raised, or withdrawn before it
        ran -- not when its outcome is reported: a call whose ``start_to_close`` passed, or
        whose workflow was cancelled, runs on and still counts against the limit."""
        context = contextvars.copy_context()
        context.run(current_activity.set, info)
        if permit is None:
            future = self._loop.run_in_executor(self._pool, context.run, definition.fn, *values)
        else:  # the pool's own future: it says when the thread is done, not when it is abandoned
            call = self._pool.submit(context.run, definition.fn, *values)
            call.add_done_callback(thread_over(self._loop, permit))
            future = asyncio.wrap_future(call, loop=self._loop)
        state = {"open": True}

        def report(value: Any, error: BaseException | None) -> None:
            if state["open"]:
                state["open"] = False
                done(value, error)

        def expire() -> None:
            report(None, start_to_close_exceeded(definition.name, timeout))  # type: ignore[arg-type]
            # Withdrawn if still queued for a thread (each retry would queue another copy);
            # a call already running cannot be stopped and runs on, its outcome ignored.
            future.cancel()

        timer = None if timeout is None else self._loop.call_later(timeout, expire)

        def finished(future: asyncio.Future[Any]) -> None:
            if timer is not None:
                timer.cancel()
            if future.cancelled():
                report(None, asyncio.CancelledError())
                return
            error = future.exception()
            report(future.result() if error is None else None, None if error is None else contained(error, f"activity {definition.name!r}"))

        future.add_done_callback(finished)

        def cancel() -> None:
            state["open"] = False
            future.cancel()

        return cancel

    def close(self) -> None:
        if self.permits is not None:
            self.permits.close()
        self._queue.clear()
        for task in list(self.tasks):
            task.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
