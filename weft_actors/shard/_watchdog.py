"""The loop-stall watchdog: a thread that names whatever keeps an engine's loop from turning.

Everything an engine does runs on one event loop, so one blocking call (``time.sleep`` in an
``async def`` activity, a busy loop in workflow code) stops every workflow of the engine and,
past its ttl, costs it its lease. The loop bumps ``last_turn`` from a ``call_later`` tick every
``interval`` seconds (no cost per step); the thread wakes as often and, once the tick is late by
more than ``threshold``, logs a WARNING with the loop thread's stack and the culprit found in
it: the activity (an ``ActivityInfo`` local) or the workflow (a ``WorkflowRun`` or actor local)
running there, the way Temporal's deadlock detector names it. Once per stall, again each time
it has gone on four times as long. The same tick measures the loop's *lag*: how late it fires,
which is how long any ready callback (a request, a commit's resume) waits for the loop right
now; ``lag`` is the worst of the last second's ticks, the gauge ``stats()`` reports.

Blame goes by evidence, not by the stack: the engine's *loop slot* (``store.LoopSlot``, set
before and after every piece of user code on the loop: ``_on_loop``) names the workflow, run,
op and activity whose code holds the loop. While the loop is late this thread copies it into
the slot's shared file, which outlives the process (the supervisor reads it after a death),
and a stall it names leaves a *stall note* (``notes``: a file on one machine, a row of the
store on PostgreSQL): if the stall costs the engine its lease, the takeover charges that
workflow alone, not every workflow the engine held (``store._quarantine``). A stall in
engine code names nobody and leaves no note. The engine removes the note at its next
heartbeat that succeeds (``clear_note``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any, Callable

from ..store import LoopSlot, StallNotes, loop_slot_path
from ..workflow import ActivityInfo, WorkflowRun
from ._actor import Actor
from ._on_loop import describe

__all__ = ["LoopWatchdog", "open_slot", "find_culprit", "culprit"]

log = logging.getLogger("weft_actors.shard")


def open_slot(store_path: str, engine_id: str, threshold: float) -> LoopSlot | None:
    """The engine's loop slot, or None (and a WARNING) where its file cannot be made: stalls
    and deaths of this engine then blame nobody."""
    path = loop_slot_path(store_path, engine_id)
    try:
        return LoopSlot(path, threshold)
    except (OSError, ValueError) as exc:
        log.warning("engine %s: cannot make its loop slot %s (%s): its stalls will blame no workflow", engine_id, path, exc)
        return None


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def find_culprit(frame: FrameType | None) -> dict[str, Any] | None:
    """Who runs in ``frame``'s stack: the innermost activity, else workflow code, else an
    actor's engine code (None: no workflow's); each frame's locals, from the innermost out."""
    run: Any = None
    actor: Any = None
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if type(value) is ActivityInfo:
                return {"wid": value.workflow_id, "run_id": value.run_id, "kind": "activity", "name": value.activity, "seq": value.seq, "attempt": value.attempt}
            if run is None and isinstance(value, WorkflowRun):
                run = value
            elif actor is None and isinstance(value, Actor):
                actor = value
        frame = frame.f_back
    if run is not None:
        return {"wid": run.workflow_id, "run_id": run.run_id, "kind": "workflow code", "name": None, "seq": run.next_seq, "type": run.workflow_type}
    if actor is not None:
        return {"wid": actor.wid, "run_id": actor.run_id, "kind": "engine code", "name": None, "seq": None}
    return None


def culprit(found: dict[str, Any] | None) -> str:
    if found is None:
        return "no workflow code (engine or other code)"
    if found["kind"] == "activity":
        return f"workflow {found['wid']!r} run {found['run_id']} activity {found['name']!r} (op #{found['seq']}, attempt {found['attempt']})"
    if found["kind"] == "workflow code":
        return f"workflow {found['wid']!r} ({found['type']}) run {found['run_id']} workflow code"
    return f"workflow {found['wid']!r} run {found['run_id']} engine code"


class LoopWatchdog:
    """Start on the loop's thread; ``stop`` from it (idempotent)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        threshold: float = 1.0,
        *,
        name: str = "",
        interval: float | None = None,
        slot: LoopSlot | None = None,
        notes: StallNotes | None = None,
        waiting: Callable[[], bool] | None = None,
    ) -> None:
        self.loop = loop
        self.waiting = waiting
        """Whether the loop's thread is in a round trip to its store's server now (PostgreSQL:
        ``PgEnvironment.waiting_on_server``): a loop held there waits, it is not hung."""
        self.slot = slot
        self.notes = notes
        self.noted = False
        """A stall note was left (set by this thread, cleared by ``clear_note``)."""
        self.threshold = threshold
        self.interval = min(0.25, threshold / 4) if interval is None else interval
        self.name = name
        self.last_turn = time.monotonic()
        self.stalls = 0
        """Stalls seen (each counted once, however long it lasts)."""
        self.longest = 0.0
        self._lags: collections.deque[float] = collections.deque(maxlen=max(1, round(1.0 / self.interval)))
        """How late each of the last second's ticks fired (seconds)."""
        self._due = 0.0
        self._loop_thread = 0
        self._handle: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._published: Any = None
        self._published_at = 0.0
        self._seen_since = 0.0
        """When this thread first saw ``_published`` on the loop: the piece held it since then
        at least (it may have come on up to a tick earlier, never before: blame only what is
        seen to hold the loop, not whatever came on last in a stall of engine code)."""
        self._noted: tuple[Any, float] | None = None
        """The piece (and loop turn) the last stall note was left for: one note per piece."""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self.last_turn = time.monotonic()
        self._due = self.last_turn + self.interval
        self._handle = self.loop.call_later(self.interval, self._tick)
        self._thread = threading.Thread(target=self._watch, name=f"weft-watchdog-{self.name}", daemon=True)
        self._thread.start()

    def clear_note(self) -> None:
        """The engine heartbeated after a stall: it kept its lease, so the stall blames nobody."""
        if self.noted and self.notes is not None:
            self.noted = False
            self.notes.clear()

    def released(self) -> None:
        """The engine let go of its claims (a graceful stop): no note, and no slot file, is
        needed (the mapping stays until the engine is gone: this thread may still write it)."""
        self.clear_note()
        if self.slot is not None:
            remove_file(self.slot.path)

    def stop(self) -> None:
        """Stop watching; a stall note stays (a deposed engine's note is for its taker)."""
        self._stop.set()
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()

    @property
    def lag(self) -> float:
        """The worst lateness of the loop's tick over about the last second (seconds)."""
        return max(self._lags, default=0.0)

    def _tick(self) -> None:
        now = self.last_turn = time.monotonic()
        self._lags.append(max(0.0, now - self._due))
        if not self._stop.is_set():
            self._due = now + self.interval
            self._handle = self.loop.call_later(self.interval, self._tick)

    def _watch(self) -> None:
        reported_for = 0.0  # the turn of the stall already reported (0: none)
        next_report = 0.0
        stamped = 0.0
        while not self._stop.wait(self.interval):
            turn = self.last_turn
            late = time.monotonic() - turn - self.interval
            # Held in a round trip to its store's server: the loop waits, it is not hung, and
            # no code of it is to blame (nor is a note written through a cut meanwhile).
            waits = self.waiting is not None and self.waiting()
            if self.slot is not None:
                if turn != stamped:
                    stamped = turn
                    self.slot.turned(turn)  # the supervisor's proof that the loop turns
                elif waits:
                    self.slot.turned(time.monotonic())
                self._publish(self.slot, turn, 0.0 if waits else late)
            if late <= self.threshold:
                continue
            if not waits:
                self._note(late)
            if turn != reported_for:
                reported_for, next_report = turn, late * 4
                self.stalls += 1
                self._report(late, again=False)
            elif late >= next_report:
                next_report = late * 4
                self._report(late, again=True)
            if late > self.longest:
                self.longest = late

    def _publish(self, slot: LoopSlot, turn: float, late: float) -> None:
        """Copy the loop's record into the slot's shared file while the loop is late (the
        code it names has held the loop since ``turn`` at least), clear it once it turns."""
        current = slot.current if late > 0 else None
        if current is self._published and turn == self._published_at:
            return
        self._published, self._published_at = current, turn
        self._seen_since = time.monotonic()
        try:
            found = None if current is None else describe(current)
        except Exception:  # a record changing under us: name nobody rather than the wrong one
            found = None
        if found is None:
            slot.unpublish()
        else:
            slot.publish(*found, entered=self._seen_since)

    def _note(self, late: float) -> None:
        """Leave the stall note once the piece named in the slot has itself held the loop past
        the threshold (once per piece): engine code that stalled the loop before it names
        nobody, and a takeover then charges no workflow for it."""
        if self.slot is None or self.notes is None or self._published is None:
            return
        piece = (self._published, self._published_at)
        if self._noted is not None and self._noted[0] is piece[0] and self._noted[1] == piece[1]:
            return
        on_loop = self.slot.read()
        if on_loop is None or on_loop["held"] < self.threshold:
            return
        self._noted = piece
        try:
            self.notes.write({**on_loop, "at": time.time(), "stalled": late})
            self.noted = True
        except OSError as exc:
            log.warning("could not leave the stall note of this engine: %s", exc)

    def _report(self, late: float, again: bool) -> None:
        frame = sys._current_frames().get(self._loop_thread)
        try:
            found = find_culprit(frame)
            who = culprit(found)
        except Exception as exc:  # a frame changing under us: still say that the loop stalls
            found, who = None, f"unknown ({type(exc).__name__})"
        stack = "".join(traceback.format_stack(frame, limit=40)) if frame is not None else "(no stack)"
        log.warning(
            "event loop %s for %.1f s (threshold %.1f s): %s is running on it; every other "
            "workflow of this engine waits, and past its ttl the engine loses its lease. "
            "Blocking calls belong in a plain def activity (run in a thread). Loop stack:\n%s",
            "still stalled" if again else "stalled", late, self.threshold, who, stack,
        )
        del frame
