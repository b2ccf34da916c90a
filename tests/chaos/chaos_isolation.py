"""The fault-isolation faults of a chaos run, as a mixin of ``ChaosRun``: no single workflow or
stuck process may wedge a shard or stop the service.

- a *poison* workflow whose ``async def`` activity blocks the loop past the lease: its owners
  are lost until it is quarantined (visible in ``describe`` and ``list``), and it stays
  quarantined; then it is terminated, or fixed (its flag file) and lifted, and completes;
- a *hung* shard (``SIGSTOP``, never continued): the supervisor kills it within about a ttl
  and replaces it;
- a *lock stall*: a shard stops inside its write transaction (the ``commit:after-apply:N:stop``
  failpoint, armed for one process at a time): it is killed and replaced, and no other shard,
  queued behind it on the lock, is deposed or restarted;
- a *large takeover*: a backlog of parked workflows on one shard, then ``kill -9``: another
  shard takes them all over without missing its own heartbeats;
- and a watch on the supervisor: it must never exit unless the harness stops it, and no shard
  may exit with a code of its own (workflow code raising ``SystemExit`` must not stop one).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from chaos_faults import EXPIRY, TTL, _alive, _proc_stat
from chaos_faults_store import open_reader
from chaos_summary import GaveUp
from _processes import RunningSupervisor
from weft_actors import AsyncClient, Client
from weft_actors._clock import SystemClock
from weft_actors._placement import preferred
from weft_actors.errors import EngineDeposed, EngineStopped, InvalidRequest, ServerUnavailable, WeftError, WorkflowClosed

__all__ = ["IsolationMixin", "LOCK_FAILPOINT", "POISON_SLEEP"]

POISON_SLEEP = EXPIRY + 0.5
"""The poison blocks its shard's loop this long: past the lease, so every owner is lost."""
KILL_BOUND = TTL + 3.0
"""A hung shard must be gone this long after it stopped: a ttl, plus a margin for a loaded box."""
LOCK_FAILPOINT = "commit:after-apply:5:stop"
"""Armed by removing the marker file: the next shard to reach its 5th batch stops in it."""
EXIT_LINE = re.compile(r"shard \d+ \(pid (\d+)\) exited with code (-?\d+)")
PID = re.compile(r"\(pid (\d+)")
STALL_LINE = re.compile(r"event loop stalled for ([0-9.]+) s")
EXPECTED_EXITS = frozenset(("-9", "4"))
"""Killed (by the harness, or by the supervisor as hung), or deposed: any other code is a shard
that stopped by itself, e.g. because user code's SystemExit escaped."""
REMOVED = ("is hung", "was deposed", "exited with code 4")
RETRYABLE = (ServerUnavailable, EngineDeposed, EngineStopped)


class IsolationMixin:
    """Needs from ``ChaosRun`` what ``FaultsMixin`` needs, plus ``call``, ``expected``,
    ``lock``, ``summary``, ``log`` and ``request_timeout``; and ``FaultsMixin``'s
    ``_track_shards`` and ``_kill_everything`` (it comes first in ``ChaosRun``'s bases)."""

    sup: RunningSupervisor
    seed: int
    shards: int
    data_dir: Path
    read_location: str
    lock_marker: Path
    lock: threading.Lock
    sup_lock: threading.Lock
    exclusive: threading.Lock
    forced_done: threading.Event
    expected: dict[str, tuple[str, Any]]
    stop_load: threading.Event
    stop_faults: threading.Event
    request_timeout: float
    hard_deadline: float
    summary: Any
    log: Callable[[str], None]

    def violation(self, text: str) -> None:
        raise NotImplementedError

    def count(self, name: str, n: int = 1) -> None:
        raise NotImplementedError

    def call(self, what: str, fn: Callable[[], Any], tolerate: tuple[type[BaseException], ...] = ()) -> Any:
        raise NotImplementedError

    # -- bookkeeping ------------------------------------------------------------------------

    def _expect(self, wid: str, kind: str, value: Any) -> None:
        with self.lock:
            self.expected[wid] = (kind, value)

    def _note_max(self, name: str, value: float) -> None:
        with self.lock:
            setattr(self.summary, name, max(getattr(self.summary, name), value))

    def _log_mark(self) -> int:
        return len(self.sup.stderr_lines)

    def _log_since(self, mark: int) -> list[str]:
        return list(self.sup.stderr_lines[mark:])

    def _serving(self) -> list[int]:
        """Shard pids that are not stopped."""
        return [pid for pid in self._track_shards() if (stat := _proc_stat(pid)) is not None and stat[0] != "T"]

    def _engines(self) -> dict[str, dict[str, Any]]:
        with open_reader(self.read_location) as store:
            return store.engines()

    def _held_by(self, engine_id: str) -> list[str]:
        with open_reader(self.read_location) as store:
            return store.held_by(engine_id)

    def _wait_gone(self, pid: int, what: str) -> float | None:
        """Seconds until the supervisor killed stopped ``pid`` (a violation past ``KILL_BOUND``);
        None, and it is killed here, if it is still there after 15 s."""
        began = time.monotonic()
        while _alive(pid) and time.monotonic() - began < 15:
            time.sleep(0.02)
        took = time.monotonic() - began
        if _alive(pid):
            self.violation(f"{what}: shard {pid} stopped and never continued is still there after 15 s")
            os.kill(pid, signal.SIGKILL)
            return None
        self.count("hung_kills")
        self._note_max("hung_kill_max_s", took)
        if took > KILL_BOUND:
            self.violation(f"{what}: shard {pid} was killed {took:.2f} s after it stopped (bound {KILL_BOUND:g} s)")
        return took

    def _wait_replaced(self, what: str) -> None:
        deadline = time.monotonic() + 20
        while len(self._serving()) < self.shards:
            if time.monotonic() > deadline:
                self.violation(f"{what}: only {len(self._serving())} of {self.shards} shards serve 20 s later")
                return
            time.sleep(0.05)

    def _no_removals(self, what: str, mark: int, spared: set[int]) -> None:
        """No shard but those in ``spared`` was found hung, deposed or restarted since ``mark``."""
        for line in self._log_since(mark):
            pid = PID.search(line)
            if pid is not None and int(pid.group(1)) in spared:
                continue
            if any(word in line for word in REMOVED) or EXIT_LINE.search(line) is not None:
                self.violation(f"{what}: another shard was removed: {line.strip()}")

    # -- the supervisor must never exit by itself ----------------------------------------------

    def _watch_supervisor(self) -> None:
        while not self.stop_load.wait(0.1):
            with self.sup_lock:
                process = self.sup.process
                if process is None or process.poll() is None:
                    continue
                self.count("supervisor_exits")
                tail = "".join(self.sup.stderr_lines[-15:])
                self.violation(f"the supervisor exited by itself with code {process.returncode}; its log ends:\n{tail}")
                self._kill_everything()
                self.sup.start()

    def _scan_exits(self) -> None:
        """Every shard exit the supervisor logged, by code (only kills and depositions), and
        every shard it killed as hung (what its ``hung_kills`` counts, over all its lives)."""
        for line in self.sup.stderr_lines:
            exited = EXIT_LINE.search(line)
            if exited is not None:
                code = exited.group(2)
                self.summary.shard_exits[code] += 1
                if code not in EXPECTED_EXITS:
                    self.violation(f"a shard exited by itself: {line.strip()}")
            elif "is hung" in line:
                self.summary.supervisor_hung_kills += 1
            elif "restart intensity exceeded" in line:
                self.violation(f"supervisor: {line.strip()}")

    # -- poison --------------------------------------------------------------------------------

    def _poison(self) -> None:
        """A poison workflow now and then, one at a time, never during a lock stall or large
        takeover (they check that no other shard is removed meanwhile)."""
        rng = random.Random(f"{self.seed}-poison")
        k = 0
        gap = (1.0, 3.0)  # the first one early: the CI budget is short
        # After the fault thread's forced early faults (they need the exclusive lock too), or
        # 25 s at the most: a poison cycle holds that lock for several seconds.
        self.forced_done.wait(25)
        while not self.stop_faults.wait(rng.uniform(*gap)):
            if not self.exclusive.acquire(timeout=0.5):
                continue
            try:
                self._poison_cycle(rng, f"poison-{self.seed}-{k}", lift=k % 2 == 0)
            finally:
                self.exclusive.release()
            k += 1
            gap = (5.0, 15.0)

    def _status(self, client: Client, wid: str) -> str:
        return self.call(f"describe {wid}", lambda: client.get_handle(wid).describe())["status"]

    def _poison_cycle(self, rng: random.Random, wid: str, lift: bool) -> None:
        """Start a poison, see it quarantined and stay so, then lift it after its fix (it must
        complete) or terminate it."""
        flag = self.data_dir.parent / f"{wid}.fixed"
        with Client(self.sup.endpoint, timeout=self.request_timeout) as client:
            self._expect(wid, "poison", None)  # until resolved below
            began = time.monotonic()
            self.call(f"start {wid}", lambda: client.start("poisoned", str(flag), POISON_SLEEP, id=wid, if_exists="return"))
            self.count("poisons")
            self.count("workflows")
            status = self._status(client, wid)
            while status == "running" and time.monotonic() - began < 60:
                time.sleep(0.2)
                status = self._status(client, wid)
            if status != "quarantined":
                self.violation(f"{wid}: a poison workflow is {status}, not quarantined, {time.monotonic() - began:.0f} s after its start")
                flag.write_text("fixed")
                self._expect(wid, "value", "fixed")
                return
            self.count("quarantined")
            described = self.call(f"describe {wid}", lambda: client.get_handle(wid).describe())
            lost = described.get("lost_owners") or {}
            self.log(f"{wid} quarantined after {time.monotonic() - began:.1f} s: {lost.get('count')} owners lost, {lost.get('reason')}")
            if lost.get("count", 0) < 1:
                self.violation(f"{wid}: quarantined with {lost.get('count')} lost owners charged to it, not 1 (--quarantine-after)")
            listed = self.call("list quarantined", lambda: client.list(status="quarantined", limit=100))
            if wid not in [item["id"] for item in listed["items"]]:
                self.violation(f"{wid}: quarantined, but not in list(status='quarantined')")
            time.sleep(EXPIRY)  # parked for good: nobody takes it and runs it again
            if (status := self._status(client, wid)) != "quarantined":
                self.violation(f"{wid}: quarantined, then {status} with nobody lifting it")
            if not lift:
                self._expect(wid, "error", "workflow_terminated")
                self.call(f"terminate {wid}", lambda: client.get_handle(wid).terminate("poison"), tolerate=(WorkflowClosed,))
                self.count("quarantine_terminated")
                return
            flag.write_text("deployed")  # the fix, then `retry`
            self._expect(wid, "value", "fixed")
            self.call(f"lift {wid}", lambda: client.get_handle(wid).lift_quarantine(), tolerate=(InvalidRequest, WorkflowClosed))
            try:
                value = self.call(f"result {wid}", lambda: client.get_handle(wid).result(timeout=20))
            except TimeoutError:
                self.violation(f"{wid}: lifted after its fix, yet no result within 20 s")
                return
            if value != "fixed":
                self.violation(f"{wid}: lifted after its fix, it returned {value!r}, not 'fixed'")
            self.count("quarantine_lifted")

    # -- hung shards -----------------------------------------------------------------------------

    def _hung_kills_now(self) -> tuple[int, int] | None:
        """(supervisor pid, its hung_kills) from ``stats()``."""
        try:
            with Client(self.sup.endpoint, timeout=self.request_timeout) as client:
                stats = client.stats()["supervisor"]
        except WeftError:
            return None
        return stats["pid"], stats["hung_kills"]

    def _hung(self, pid: int) -> None:
        """SIGSTOP, never SIGCONT: the supervisor must kill it and start another."""
        before = self._hung_kills_now()
        os.kill(pid, signal.SIGSTOP)
        self.count("hung_faults")
        if self._wait_gone(pid, "hung shard") is None:
            return
        after = self._hung_kills_now()
        if before is not None and after is not None and after[0] == before[0] and after[1] <= before[1]:
            self.violation(f"hung shard {pid} was killed, but the supervisor's hung_kills stayed {after[1]}")
        self._wait_replaced("hung shard")

    # -- a stall holding the write lock ------------------------------------------------------------

    def _lock_stall(self, rng: random.Random) -> bool:
        """False if no shard reached the failpoint in time (then it is disarmed again)."""
        marker = self.lock_marker
        mark = self._log_mark()
        marker.unlink()  # armed: the next shard at its 5th batch stops holding the write lock
        pids = self._serving()
        if pids:  # a fresh shard gets there soonest
            victim = rng.choice(pids)
            os.kill(victim, signal.SIGKILL)
            self.count("kills")
        deadline = time.monotonic() + 20
        while not (marker.exists() and marker.read_text().strip()):
            if time.monotonic() > deadline:
                try:  # disarm; if that fails, a shard stopped at this very moment
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                    self.log("lock stall: no shard reached the failpoint in 20 s; disarmed")
                    return False
                except FileExistsError:
                    pass
            time.sleep(0.02)
        stalled = int(marker.read_text())
        self.count("lock_stalls")
        self.log(f"lock stall: shard {stalled} stopped holding the write lock")
        others = {pid for pid in self._track_shards() if pid != stalled}
        if self._wait_gone(stalled, "lock stall") is None:
            return True
        self._wait_replaced("lock stall")
        time.sleep(2 * TTL)  # a shard deposed by the stall would find out at its next heartbeat
        gone = sorted(pid for pid in others if not _alive(pid))
        if gone:
            self.violation(f"lock stall: shards {gone} died while shard {stalled} stalled holding the write lock")
        self._no_removals("lock stall", mark, spared={stalled} | ({victim} if pids else set()))
        return True

    # -- a large takeover ----------------------------------------------------------------------------

    def _large_takeover(self, rng: random.Random, size: int, index: int) -> bool:
        """Build ``size`` parked workflows on one shard, kill it, watch the takeover; False if
        fewer than two shards serve (nothing done)."""
        now = SystemClock().lease_now()  # leases are judged on the lease clock
        serving = set(self._serving())
        engines = {eid: rec["pid"] for eid, rec in self._engines().items() if rec.get("state") == "live" and rec["expires_at"] > now and rec.get("pid") in serving}
        if len(engines) < 2:
            return False
        target = rng.choice(sorted(engines))
        backlog: list[tuple[str, int, float]] = []
        i = 0
        while len(backlog) < size:
            wid = f"backlog-{self.seed}-{index}-{i}"
            i += 1
            if preferred(wid, list(engines)) == target:  # owner routing places it on the target
                backlog.append((wid, rng.randrange(1000), round(rng.uniform(8.0, 16.0), 3)))
        for wid, n, _ in backlog:
            self._expect(wid, "value", n)
        built = time.monotonic()
        asyncio.run(self._start_backlog(backlog))
        self.count("workflows", len(backlog))
        held: dict[str, int] = {}
        for eid in engines:
            held[eid] = len(self._held_by(eid))
        victim = max(held, key=lambda eid: held[eid])
        pid = engines[victim]
        if not _alive(pid):
            return False  # its workflows are taken over already; they still must complete
        mark = self._log_mark()
        others = {p for p in self._track_shards() if p != pid}
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        self.count("kills")
        self.count("large_takeovers")
        self.count("takeover_workflows", held[victim])
        while self._held_by(victim):
            if time.monotonic() - killed > 30:
                self.violation(f"large takeover: {len(self._held_by(victim))} of {held[victim]} workflows still held by the killed shard 30 s later")
                break
            time.sleep(0.05)
        took = time.monotonic() - killed
        self._note_max("takeover_max_s", took)
        self.log(f"large takeover: {held[victim]} of {size} workflows (built in {killed - built:.1f} s) taken over in {took:.2f} s")
        time.sleep(2 * TTL)
        stalls = [float(m.group(1)) for line in self._log_since(mark) if (m := STALL_LINE.search(line))]
        self._note_max("takeover_max_loop_stall_s", max(stalls, default=0.0))
        gone = sorted(p for p in others if not _alive(p))
        if gone:
            self.violation(f"large takeover: shards {gone} died while they took over {held[victim]} workflows")
        self._no_removals("large takeover", mark, spared={pid})
        return True

    async def _start_backlog(self, backlog: list[tuple[str, int, float]]) -> None:
        async with AsyncClient(self.sup.endpoint, timeout=self.request_timeout) as client:
            gate = asyncio.Semaphore(32)

            async def start(wid: str, n: int, seconds: float) -> None:
                delay = 0.05
                async with gate:
                    while True:
                        try:
                            await client.start("parked", n, seconds, id=wid, if_exists="return")
                            return
                        except RETRYABLE as exc:
                            self.count("retries")
                            if time.monotonic() > self.hard_deadline:
                                raise GaveUp(f"start {wid}: still failing at the hard deadline: {exc}") from exc
                            await asyncio.sleep(delay)
                            delay = min(2 * delay, 0.5)

            await asyncio.gather(*(start(*item) for item in backlog))

