"""A dependency-free progress bar on stderr for the benchmarks."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str) -> None:
        self.total = max(1, total)
        self.label = label
        self.done = 0
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= 0.2 or self.done >= self.total:
            self._last = now
            self._draw()

    def _draw(self) -> None:
        width = 30
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        end = "\r" if self._tty and self.done < self.total else "\n"
        if not self._tty and self.done < self.total:
            return
        sys.stderr.write(f"{self.label} [{bar}] {self.done}/{self.total}{end}")
        sys.stderr.flush()
