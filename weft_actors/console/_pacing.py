"""Pacing the console's store reads so that they never crowd out the front door.

The console runs inside the supervisor, beside the front door, in one process with one GIL
and, on a small machine, a core or two shared with the shards. A page is cheap (it reads
about as many index entries as it shows, ``_listing``), but clients requesting pages back to
back, a few at a time, would still keep a core and the GIL busy with the console. So the
reads take turns: one at a time, and after a read that took ``t`` seconds the next one starts
no sooner than ``(t + overhead) / share`` after it began, so the reads (and the work around
each, ``overhead``) hold at most ``share`` of the process's time however many clients ask. A request waits for its turn blocked (holding no
GIL); one that would wait longer than ``max_wait`` is refused with ``Overloaded`` (503),
failing only itself. One operator's browsing never notices: a page of a few milliseconds
lets the next one start a few tens of milliseconds later at most.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

from ..errors import Overloaded

__all__ = ["ReadPacer", "READ_SHARE", "PAGE_OVERHEAD", "MAX_WAIT"]

READ_SHARE = 0.05
"""The share of wall-clock time the console's store reads (with ``PAGE_OVERHEAD`` each) may
take at most. A tenth still cost the front door a third of its serial starts with six clients
requesting pages back to back on two cores (the requests cost more around the read than the
charge says); a twentieth kept it within noise (``bench/console_list.py``). That is still
about twenty pages a second for scripts, and a wait no person sees."""
PAGE_OVERHEAD = 0.002
"""Seconds charged to each read on top of its own time: what the supervisor spends on the
request around it (parsing it, rendering and sending the page), outside the turn."""
MAX_WAIT = 10.0
"""Seconds a read waits for its turn before it is refused."""


class ReadPacer:
    """Turns for the console's store reads (``turn()``); thread-safe. The clock and the sleep
    are injectable for tests."""

    def __init__(
        self,
        share: float = READ_SHARE,
        max_wait: float = MAX_WAIT,
        *,
        overhead: float = PAGE_OVERHEAD,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.share, self.max_wait, self.overhead = share, max_wait, overhead
        self._monotonic, self._sleep = monotonic, sleep
        self._lock = threading.Lock()
        self._next = float("-inf")
        """When the next read may start."""
        self.reads = 0
        self.busy = 0.0
        """Reads made and seconds they took: what the pacing bounds."""

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for this read's turn, then read (the ``with`` body); ``Overloaded`` if the turn
        would come later than ``max_wait`` from now."""
        asked = self._monotonic()
        refused = Overloaded(
            f"the console is serving other reads; retry in a moment (reads may take {self.share:.0%} of the supervisor's time)",
            limit="console_read_share",
            value=self.share,
        )
        if not self._lock.acquire(timeout=self.max_wait):
            raise refused
        try:
            now = self._monotonic()
            if self._next > now:
                if self._next - asked > self.max_wait:
                    raise refused
                self._sleep(self._next - now)
            started = self._monotonic()
            try:
                yield
            finally:
                took = self._monotonic() - started
                self._next = started + (took + self.overhead) / self.share
                self.reads += 1
                self.busy += took
        finally:
            self._lock.release()
