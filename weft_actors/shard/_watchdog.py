"""The loop-stall watchdog: a thread that names whatever keeps an engine's loop from turning.

Everything an engine does runs on one event loop, so one blocking call (``time.sleep`` in an
``async def`` activity, a busy loop in workflow code) stops every workflow of the engine and,
past its ttl, costs it its lease. The loop bumps ``last_turn`` from a ``call_later`` tick every
``interval`` seconds (no cost per step); the thread wakes as often and, once the tick is late by
more than ``threshold``, logs a WARNING with the loop thread's stack and the culprit found in
it: the activity (an ``ActivityInfo`` local) or the workflow (a ``WorkflowRun`` or actor local)
running there, the way Temporal's deadlock detector names it. Once per stall, again each time
it has gone on four times as long.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any

from ..workflow import ActivityInfo, WorkflowRun
from ._actor import Actor

__all__ = ["LoopWatchdog", "culprit"]

log = logging.getLogger("weft_actors.shard")


def culprit(frame: FrameType | None) -> str:
    """Who runs in ``frame``'s stack: the innermost activity, else workflow code, else an
    actor's engine code; the locals of each frame are looked at from the innermost out."""
    run: Any = None
    actor: Any = None
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if type(value) is ActivityInfo:
                return (
                    f"workflow {value.workflow_id!r} run {value.run_id} activity {value.activity!r} "
                    f"(op #{value.seq}, attempt {value.attempt})"
                )
            if run is None and isinstance(value, WorkflowRun):
                run = value
            elif actor is None and isinstance(value, Actor):
                actor = value
        frame = frame.f_back
    if run is not None:
        return f"workflow {run.workflow_id!r} ({run.workflow_type}) run {run.run_id} workflow code"
    if actor is not None:
        return f"workflow {actor.wid!r} run {actor.run_id} engine code"
    return "no workflow code (engine or other code)"


class LoopWatchdog:
    """Start on the loop's thread; ``stop`` from it (idempotent)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float = 1.0, *, name: str = "", interval: float | None = None) -> None:
        self.loop = loop
        self.threshold = threshold
        self.interval = min(0.25, threshold / 4) if interval is None else interval
        self.name = name
        self.last_turn = time.monotonic()
        self.stalls = 0
        """Stalls seen (each counted once, however long it lasts)."""
        self.longest = 0.0
        self._loop_thread = 0
        self._handle: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self.last_turn = time.monotonic()
        self._handle = self.loop.call_later(self.interval, self._tick)
        self._thread = threading.Thread(target=self._watch, name=f"weft-watchdog-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()

    def _tick(self) -> None:
        self.last_turn = time.monotonic()
        if not self._stop.is_set():
            self._handle = self.loop.call_later(self.interval, self._tick)

    def _watch(self) -> None:
        reported_for = 0.0  # the turn of the stall already reported (0: none)
        next_report = 0.0
        while not self._stop.wait(self.interval):
            turn = self.last_turn
            late = time.monotonic() - turn - self.interval
            if late <= self.threshold:
                continue
            if turn != reported_for:
                reported_for, next_report = turn, late * 4
                self.stalls += 1
                self._report(late, again=False)
            elif late >= next_report:
                next_report = late * 4
                self._report(late, again=True)
            if late > self.longest:
                self.longest = late

    def _report(self, late: float, again: bool) -> None:
        frame = sys._current_frames().get(self._loop_thread)
        try:
            who = culprit(frame)
        except Exception as exc:  # a frame changing under us: still say that the loop stalls
            who = f"unknown ({type(exc).__name__})"
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
        log.warning(
            "event loop %s for %.1f s (threshold %.1f s): %s is running on it; every other "
            "workflow of this engine waits, and past its ttl the engine loses its lease. "
            "Blocking calls belong in a plain def activity (run in a thread). Loop stack:\n%s",
            "still stalled" if again else "stalled", late, self.threshold, who, stack,
        )
        del frame
