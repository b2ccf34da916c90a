"""Helpers for testing code that uses weft_actors: a clock that moves only when told to, a
time-skipping environment in which a workflow that sleeps for days ends in milliseconds, and
``replay_history``, which checks a recorded history (``python -m weft_actors export``)
against the code under test."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from typing import Any

from .errors import NonDeterminismError
from .history import History, loads

__all__ = ["FakeClock", "TimeSkippingEnvironment", "replay_history"]


def replay_history(source: History | str | bytes | os.PathLike[str], app: Any) -> dict[str, Any]:
    """Replay a recorded history against the workflows in ``app`` (a module, or a list of
    ``@workflow`` functions) without executing anything; raise ``NonDeterminismError`` if
    the code no longer replays it, else return the report (``next``: what it would run).

    ``source``: a ``History``, the JSON text ``export`` wrote, or the path of such a file.
    Keep a few exported histories of long-running workflows beside your tests: a change that
    would break them in production then fails in CI instead."""
    from .admin import replay_history as report_of  # the command's replay, one code path

    if isinstance(source, History):
        recorded = source
    elif isinstance(source, bytes) or (isinstance(source, str) and source.lstrip().startswith("{")):
        recorded = loads(source)
    else:
        with open(source, "rb") as f:
            recorded = loads(f.read())
    report = report_of(recorded, app)
    if not report["ok"]:
        raise NonDeterminismError(report.get("divergence", "the history does not replay"), workflow_id=recorded.workflow_id, report=report)
    return report


class FakeClock:
    """A clock that moves only when told to; pass it as ``Engine(..., clock=FakeClock())``.

    ``advance`` moves every kind of time together; ``jump`` moves the wall clock alone, either
    way, as NTP or an operator would (leases, judged by ``lease_now()``, do not see it)."""

    lease_clock = "fake"

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 1000.0
        self._lease = start
        """Starts at the wall time: until a jump, a lease reading equals the wall reading."""

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def lease_now(self) -> float:
        return self._lease

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._now += seconds
        self._mono += seconds
        self._lease += seconds

    def jump(self, seconds: float) -> None:
        """Move the wall clock alone by ``seconds`` (negative: back)."""
        self._now += seconds


_TIMER_GRAIN = 0.001
"""Durable timers are kept to the millisecond: a jump lands this far past one to be sure it is due."""


class TimeSkippingEnvironment:
    """An embedded ``Engine`` on a temporary store whose workflow time skips ahead, as in
    Temporal's time-skipping test environment::

        async with TimeSkippingEnvironment(app=[approval]) as env:
            handle = await env.engine.start(approval, "order-1")
            await env.sleep(86_400)            # a day passes: the reminder timer fires
            await handle.signal("approve", True)
            assert await env.result(handle) == "approved"

    Workflow time (timers, ``ctx.now()``, start delays, execution timeouts) is virtual and
    starts at ``start`` (seconds since the epoch). It moves only inside ``sleep`` (by exactly
    that much, firing each timer on the way in order) and while ``result``/``execute`` wait:
    then, whenever nothing can happen but a timer (no activity running, no commit or replay
    pending), it jumps to the next one. Activities run in real time and are never skipped
    over. Only the wall clock moves: the engine's lease does not expire however far it goes.
    ``skipped`` is the virtual time skipped so far.
    """

    def __init__(self, app: Any, *, start: float = 1_700_000_000.0, settle: float = 0.002, **engine_options: Any) -> None:
        self.app = app
        self.clock = FakeClock(start)
        self.skipped = 0.0
        self._settle = settle
        self._options = engine_options
        self._data_dir: str | None = None
        self._engine: Any = None

    @property
    def engine(self) -> Any:
        if self._engine is None:
            raise RuntimeError("the environment is not open: use `async with TimeSkippingEnvironment(...)`")
        return self._engine

    def now(self) -> float:
        """The workflows' time."""
        return self.clock.now()

    async def __aenter__(self) -> TimeSkippingEnvironment:
        from .shard import Engine  # the engine imports nothing from here

        self._data_dir = tempfile.mkdtemp(prefix="weft-test-")
        self._engine = Engine(self._data_dir, app=self.app, clock=self.clock, **self._options)
        await self._engine.open()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            if self._engine is not None:
                await self._engine.close()
        finally:
            self._engine = None
            if self._data_dir is not None:
                shutil.rmtree(self._data_dir, ignore_errors=True)

    async def restart(self, downtime: float = 0.0) -> None:
        """Close the engine, let ``downtime`` seconds of workflow time pass with nothing
        running, and open a new engine on the same store: what an outage or a deploy does
        to timers and schedules (overdue timers fire at once; schedules catch up)."""
        from .shard import Engine

        if not downtime >= 0:
            raise ValueError("downtime must be >= 0")
        await self.engine.close()
        self._engine = None
        assert self._data_dir is not None  # open, as ``engine`` checked
        self.clock.jump(downtime)
        self.skipped += downtime
        self._engine = Engine(self._data_dir, app=self.app, clock=self.clock, **self._options)
        await self._engine.open()

    async def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of workflow time pass, firing every timer due by then in order and
        letting what each sets off run (real time) before the next."""
        if not seconds >= 0:
            raise ValueError("seconds must be >= 0")
        target = self.clock.now() + seconds
        while True:
            await self._until_idle()
            due = self._next_due()
            if due is None or due > target:
                break
            self._jump_to(due)
        self._jump_to(target, exact=True)
        await self._until_idle()

    async def result(self, handle: Any, timeout: float | None = 30.0) -> Any:
        """``handle``'s result (a handle or a workflow id), skipping time while it waits;
        ``timeout`` is in real seconds."""
        wid = handle if isinstance(handle, str) else handle.id
        waiting = asyncio.ensure_future(self.engine.result(wid, timeout))
        skipper = asyncio.ensure_future(self._skip_while(waiting))
        try:
            return await waiting
        finally:
            skipper.cancel()
            try:
                await skipper
            except asyncio.CancelledError:
                pass

    async def execute(self, workflow: Any, *args: Any, timeout: float | None = 30.0, **start_options: Any) -> Any:
        """Start ``workflow(*args)`` and return its result, skipping time meanwhile."""
        handle = await self.engine.start(workflow, *args, **start_options)
        return await self.result(handle, timeout)

    # -- skipping -----------------------------------------------------------------------------

    async def _skip_while(self, waiting: asyncio.Future[Any]) -> None:
        while not waiting.done():
            await self._until_idle()
            if waiting.done():
                return
            due = self._next_due()
            if due is None:
                await asyncio.sleep(self._settle)  # nothing to skip to: a signal may come
                continue
            self._jump_to(due)

    def _idle(self) -> bool:
        """Nothing can happen now but a timer: no activity attempt in flight or waiting for a
        slot or a permit (but one that waits for a rate limit's next permit: a timer), no intent
        waiting for its commit, no workflow waiting to be replayed."""
        engine = self.engine
        activities = engine.activities
        timed = 0 if activities.permits is None else activities.permits.timed
        return not activities.inflight and activities.queued <= timed and not engine.committer.pending and not len(engine.driver)

    async def _until_idle(self) -> None:
        """Yield until the engine has been idle across two settles (real time)."""
        calm = 0
        while calm < 2:
            await asyncio.sleep(self._settle)
            calm = calm + 1 if self._idle() else 0

    def _next_due(self) -> float | None:
        engine = self.engine
        stops = [t for t in (engine.timers.next_fire(), engine.store.next_timer()) if t is not None]
        return min(stops) if stops else None

    def _jump_to(self, at: float, exact: bool = False) -> None:
        """Move workflow time to ``at`` (never back) and fire what is due."""
        at = at if exact else at + _TIMER_GRAIN
        now = self.clock.now()
        if at > now:
            self.clock.jump(at - now)
            self.skipped += at - now
        self.engine.tick()
