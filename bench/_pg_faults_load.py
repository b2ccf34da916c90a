"""The steady load of ``pg_faults.py``: ``relay`` workflows (``tests/two_hosts_app.py``)
started at a fixed rate through both supervisors' front doors, as a client that must get
through an outage would: a start without an answer, or refused while the database is out
(``StorageError``), is sent again with the same id (``if_exists="return"``), to the other
host after a failure. A start counts as acknowledged only once a front door answered it."""

from __future__ import annotations

import random
import threading
import time

from _two_hosts import Spec
from weft_actors import Client
from weft_actors.errors import EngineDeposed, EngineStopped, Overloaded, ServerUnavailable, StorageError, WeftError

__all__ = ["SteadyLoad", "RETRYABLE", "shard_pids"]

RETRYABLE = (ServerUnavailable, EngineDeposed, EngineStopped, Overloaded, StorageError)
"""No answer, or refused for now (the database out): sent again, the same id."""
STARTERS_PER_HOST = 2
"""Threads per front door: one start held up by an outage does not stop the others."""


class SteadyLoad:
    def __init__(self, endpoints: list[str], *, rate: float, seed: int, prefix: str, timeout: float = 3.0) -> None:
        self.endpoints = endpoints
        self.gap = len(endpoints) * STARTERS_PER_HOST / rate
        self.rng = random.Random(f"{seed}-{prefix}-load")
        self.prefix = prefix
        self.timeout = timeout
        self.acked: list[Spec] = []
        self.unanswered = 0
        """Starts still unanswered when the load stopped: they may or may not have landed."""
        self.errors: list[str] = []
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(host,), name=f"load-{host}-{k}", daemon=True)
            for host in range(len(endpoints)) for k in range(STARTERS_PER_HOST)
        ]

    def start(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(2 * self.timeout + 1)

    def acknowledged_specs(self) -> list[Spec]:
        with self._lock:
            return list(self.acked)

    def _spec(self, host: int) -> Spec:
        with self._lock:
            i = self._next
            self._next += 1
            nap = self.rng.uniform(2.0, 5.0) if i % 4 == 0 else self.rng.uniform(0.1, 1.0)
            work = self.rng.uniform(0.02, 0.25)
        return Spec(f"relay-{self.prefix}-{i}", i, round(nap, 3), round(work, 3), host)

    def _run(self, host: int) -> None:
        clients = [Client(endpoint, timeout=self.timeout) for endpoint in self.endpoints]
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                spec = self._spec(host)
                if self._start_one(spec, clients, host):
                    with self._lock:
                        self.acked.append(spec)
                else:
                    with self._lock:
                        self.unanswered += 1
                next_at = max(next_at + self.gap, time.monotonic() - self.gap)
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            for client in clients:
                client.close()

    def _start_one(self, spec: Spec, clients: list[Client], current: int) -> bool:
        """True once a front door answered; False if the load stopped first."""
        delay = 0.05
        while not self._stop.is_set():
            try:
                clients[current].start("relay", spec.n, spec.nap, spec.work, id=spec.wid, if_exists="return")
                return True
            except RETRYABLE:
                current = (current + 1) % len(clients)
            except WeftError as exc:  # a client must never see another error: reported
                with self._lock:
                    self.errors.append(f"{spec.wid}: {exc.code}: {exc}")
                return False
            self._stop.wait(delay)
            delay = min(2 * delay, 1.0)
        return False


def shard_pids(supervisor_pid: int) -> list[int]:
    """Live shard processes of a supervisor (its ``spawn_main`` children, from /proc)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                is_shard = b"spawn_main" in cmdline.read()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == supervisor_pid and fields[0] != "Z" and is_shard:
            found.append(int(entry))
    return sorted(found)

