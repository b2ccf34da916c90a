"""A steady open-loop load of starts for the rolling restart and resize tests: every failure
and every start's latency kept, for the assertions."""

from __future__ import annotations

import threading
import time
from typing import Any

from weft_actors import Client


class SteadyStarts:
    """Starts ``two_charges`` workflows at a steady rate from its own thread; every failure kept."""

    def __init__(self, endpoint: str, rate: float) -> None:
        self.endpoint, self.interval = endpoint, 1.0 / rate
        self.started: list[str] = []
        self.failures: list[BaseException] = []
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SteadyStarts:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with Client(self.endpoint, timeout=30) as client:
            n = 0
            while not self._stop.is_set():
                tag = f"load{n}"
                n += 1
                began = time.monotonic()
                try:
                    client.start("two_charges", tag, 0.05, id=tag)
                    self.started.append(tag)
                except Exception as exc:  # noqa: BLE001 - every failure is the assertion's
                    self.failures.append(exc)
                self.latencies.append(time.monotonic() - began)
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
