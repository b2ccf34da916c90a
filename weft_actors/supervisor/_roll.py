"""A rolling restart: every shard replaced by a fresh process, one at a time, none of its
workflows failed and none of its running activity attempts run twice.

Asked by ``python -m weft_actors shards restart`` (the ``shards`` op, through the front door)
or by ``SIGHUP``. Per shard, in slot order: the running workflows are replayed against the
code on disk in a fresh process (``_deploy_check``; the first divergence stops the roll with
the old shards still serving), the shard hands its workflows off to another ready shard
(``_handoffs``: taken out of the routing, its running attempts finish there, its claims move
in fenced batches), exits 0 and is started again, a spawned process that imports the app
module anew; once it is ready, the next shard. One roll at a time: a request while one runs
is refused with ``RollInProgress`` (not queued: the operator sees at once that the one
running covers the change, or asks again after it).

This runs in the supervisor's main loop (``step``), except ``request``, which the front
door's thread calls and a lock guards; a signal handler only raises a flag (``signalled``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Protocol, Sequence

from ..errors import RollInProgress
from ._deploy_check import DeployCheck
from ._quiet import QuietWait
from ._resize import Resize

__all__ = ["Roll", "REPLACE_TIMEOUT", "hangup_handler"]

log = logging.getLogger("weft_actors.supervisor")

REPLACE_TIMEOUT = 60.0
"""Seconds a replaced shard gets to be ready again (after its handoff's grace period)."""
CHECK_TIMEOUT = 300.0
"""Seconds a replay check may take before the roll stops."""


class _Slot(Protocol):
    index: int
    ready: bool
    engine_id: str | None
    control: Any
    pid: int | None
    process: Any


class _Handoffs(Protocol):
    grace: float

    def hand_over(self, draining: Any, successor: Any, routing: Any) -> bool: ...


class Roll:
    """The state of the rolling restart: idle, or the slot it replaces and in which phase
    (``checking``, ``handing``, ``starting``); ``last`` is how the previous one ended."""

    def __init__(self, wake_fd: int, data_dir: str, app: str, check: Callable[[str, str], Any] = DeployCheck) -> None:
        self._wake_fd = wake_fd
        self._data_dir = data_dir
        self._app = app
        self._new_check = check
        self._lock = threading.Lock()
        self._wanted: str | None = None
        self.number = 0
        """Rolls asked for so far: ``request`` answers its roll's number, ``last`` names it."""
        self.signalled = False
        """Set by the SIGHUP handler (async-signal-safe: a flag, taken by ``step``)."""
        self.phase = "idle"
        self.source = ""
        self.queue: list[int] = []
        self.replaced: list[int] = []
        self.checked = 0
        self.started_at = 0.0
        self.last: dict[str, Any] | None = None
        self._check: Any = None
        self._count: int | None = None
        self._resize: Resize | None = None
        self._quiet: QuietWait | None = None
        self._old_pid: int | None = None
        self._deadline = 0.0

    # -- asking (any thread) --------------------------------------------------------------

    def request(self, source: str, count: int | None = None) -> dict[str, Any]:
        """Ask for a roll, or with ``count`` a resize to that many shards (from the front
        door's thread); ``RollInProgress`` while either runs."""
        with self._lock:
            if self._wanted is not None or self.phase != "idle":
                raise RollInProgress(f"a rolling restart or resize is running already ({self.progress()}); ask again once it ended")
            self._wanted, self._count = source, count
            self.number += 1
            number = self.number
        self._wake()
        return {"accepted": "restart" if count is None else "set", "roll": number}

    def on_signal(self) -> None:
        """The SIGHUP handler's part: a flag and a byte on the wake pipe."""
        self.signalled = True
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_fd, b"r")
        except OSError:
            pass

    # -- driving it (the supervisor's main loop) ------------------------------------------

    @property
    def running(self) -> bool:
        return self.phase != "idle"

    def step(self, slots: list[Any], handoffs: _Handoffs, routing: Any, held: Callable[[int], int] = lambda slot: 0) -> None:
        """Move the roll on as far as it can go now; never waits."""
        if self.signalled:
            self.signalled = False
            with self._lock:
                if self._wanted is None and self.phase == "idle":
                    self._wanted = "SIGHUP"
                    self.number += 1
                else:
                    log.warning("SIGHUP: a rolling restart is running already (%s); not starting another", self.progress())
        if self.phase == "idle":
            self._begin(slots)
        if self.phase == "resizing" and self._resize is not None:
            ended = self._resize.step(slots, handoffs, routing, held)
            if ended is not None:
                self._resize = None
                self._end(*ended)
        if self.phase == "checking":
            self._checked(slots)
        if self.phase == "handing":
            self._hand(slots, handoffs, routing, held)
        if self.phase == "starting":
            self._started(slots)

    def _begin(self, slots: list[Any]) -> None:
        with self._lock:
            source, self._wanted, count = self._wanted, None, self._count
            if source is None:
                return
            self.phase = "checking" if count is None else "resizing"
        self.source, self.queue, self.replaced, self.checked = source, [slot.index for slot in slots], [], 0
        self.started_at = time.monotonic()
        if count is not None:
            self.queue = []
            self._resize = Resize(count, slots, REPLACE_TIMEOUT)
            return
        if len(slots) < 2:
            self._end("refused", "a rolling restart needs at least 2 shards: one takes the workflows of the one replaced")
            return
        log.info("rolling restart (%s): %d shards, one at a time", source, len(slots))
        self._start_check()

    def _start_check(self) -> None:
        self.phase = "checking"
        self._deadline = time.monotonic() + CHECK_TIMEOUT
        self._check = self._new_check(self._data_dir, self._app)

    def _checked(self, slots: Sequence[_Slot]) -> None:
        outcome = self._check.poll()
        if outcome is None:
            if time.monotonic() > self._deadline:
                self._check.close()
                self._end("failed", f"the replay check took more than {CHECK_TIMEOUT:.0f}s")
            return
        self._check = None
        if not outcome["ok"]:
            if outcome.get("id") is None:
                self._end("refused", f"the new code was not checked: {outcome['divergence']}")
            else:
                self._end("refused", f"workflow {outcome['id']!r} ({outcome['type']}) does not replay on the new code: {outcome['divergence']}", workflow=outcome["id"])
            return
        self.checked += outcome["checked"]
        log.info("rolling restart: %d running workflows replay on the new code; replacing shard %d", outcome["checked"], self.queue[0])
        self.phase = "handing"
        self._deadline = time.monotonic() + REPLACE_TIMEOUT

    def _hand(self, slots: Sequence[_Slot], handoffs: _Handoffs, routing: Any, held: Callable[[int], int]) -> None:
        slot = slots[self.queue[0]]
        successor = next((other for other in slots if other is not slot and other.ready and other.engine_id is not None and other.control is not None), None)
        able = slot.ready and slot.control is not None and successor is not None
        if self._quiet is not None:  # out of the routing, its writes being answered (``_quiet``)
            if not self._quiet.quiet():
                return
            if not able:
                self._quiet.cancel()
            self._quiet = None
        elif able:
            self._quiet = QuietWait(slot, routing, held)
            return
        if not able or successor is None:  # restarting, or no one to take over yet
            if time.monotonic() > self._deadline:
                self._end("failed", f"shard {slot.index} or a successor for it was not ready within {REPLACE_TIMEOUT:.0f}s")
            return
        self._old_pid = slot.pid
        if not handoffs.hand_over(slot, successor, routing):
            self._end("failed", f"shard {slot.index} could not be asked to hand off")
            return
        self.phase = "starting"
        self._deadline = time.monotonic() + handoffs.grace + REPLACE_TIMEOUT

    def _started(self, slots: Sequence[_Slot]) -> None:
        slot = slots[self.queue[0]]
        if slot.ready and slot.process is not None and slot.pid != self._old_pid:
            log.info("rolling restart: shard %d replaced (pid %s -> %s)", slot.index, self._old_pid, slot.pid)
            self.replaced.append(self.queue.pop(0))
            if self.queue:
                self._start_check()
            else:
                self._end("completed", f"{len(self.replaced)} shards replaced")
            return
        if time.monotonic() > self._deadline:
            self._end("failed", f"shard {slot.index} was not ready again in time")

    def _end(self, outcome: str, message: str, **extra: Any) -> None:
        elapsed = time.monotonic() - self.started_at
        self.last = {"roll": self.number, "outcome": outcome, "message": message, "source": self.source, "replaced": list(self.replaced), "duration_s": round(elapsed, 3), **extra}
        level = {"completed": logging.INFO, "refused": logging.WARNING}.get(outcome, logging.ERROR)
        log.log(level, "%s %s after %.1fs: %s", "resize" if self.source.startswith("shards set") else "rolling restart", outcome, elapsed, message)
        if self._check is not None:
            self._check.close()
            self._check = None
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        with self._lock:
            self.phase, self.queue = "idle", []

    def stop(self) -> None:
        """The supervisor stops: a check still running is ended."""
        if self._check is not None:
            self._check.close()
            self._check = None

    # -- reporting ------------------------------------------------------------------------

    def progress(self) -> str:
        if self.phase == "idle":
            return "idle"
        if self.phase == "resizing" and self._resize is not None:
            return f"resizing to {self._resize.target} shards"
        return f"{self.phase} shard {self.queue[0] if self.queue else '-'}, {len(self.replaced)} of {len(self.replaced) + len(self.queue)} replaced"

    def report(self) -> dict[str, Any]:
        """The roll's part of ``shards list``."""
        return {
            "phase": self.phase,
            "progress": self.progress(),
            "replaced": list(self.replaced),
            "pending": list(self.queue),
            "last": self.last,
        }


def hangup_handler(keys: Any, roll: Roll) -> Callable[[int, Any], None]:
    """The supervisor's ``SIGHUP``: a rolling restart, and a reload of the CURVE keys when
    there are keys (a revoked key takes effect at once; the front door also polls). A reload
    is cheap and harmless, so every SIGHUP does both: no signal means one thing on one host
    and another elsewhere."""

    def hangup(signum: int, frame: Any) -> None:
        if keys is not None:
            keys.reload()
        roll.on_signal()

    return hangup
