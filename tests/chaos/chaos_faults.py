"""The faults of a chaos run, as a mixin of ``ChaosRun``: kill -9 of a shard, SIGSTOP past
its lease then SIGCONT (it must depose itself and exit), a crash (kill -9 of the supervisor and
every shard) or a drain (SIGTERM) of the whole supervisor followed by a restart, and the
fault-isolation faults of ``chaos_isolation`` (a hung shard, a stall holding the write lock, a
large takeover), and with root the faults of ``chaos_faults_store`` (disk full, read-only) and
``chaos_faults_clock`` (wall-clock jumps); and a sampler that checks that no claim epoch ever shrinks or vanishes. Shards are found through /proc as
the supervisor's children, so a restarted slot's new process is found too."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from _processes import RunningSupervisor
from chaos_faults_store import open_reader
from chaos_postgres import claim_epochs, psycopg_errors
from weft_actors.errors import WeftError
from weft_actors.store import is_store_url

__all__ = ["FaultsMixin", "shard_pids", "HEARTBEAT", "TTL", "EXPIRY"]

HEARTBEAT, TTL = 0.2, 0.6
EXPIRY = TTL + 2 * HEARTBEAT
"""A stalled engine is judged expired this long after its last heartbeat."""


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, ppid)`` of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _is_shard(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"spawn_main" in handle.read()
    except OSError:
        return False


def shard_pids(supervisor_pid: int) -> list[int]:
    """Live (not zombie) shard processes of the supervisor, stopped ones included."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _proc_stat(int(entry))
        if stat is not None and stat[1] == supervisor_pid and stat[0] != "Z" and _is_shard(int(entry)):
            found.append(int(entry))
    return sorted(found)


def _defer(forced: dict[int, str], index: int, kind: str) -> None:
    """Forced fault ``kind`` could not run at ``index``: it goes next, and every forced fault
    after it one later (none is dropped)."""
    later = [forced.pop(i) for i in sorted(i for i in forced if i > index)]
    for offset, name in enumerate([kind, *later]):
        forced[index + 1 + offset] = name


def _alive(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z"


class FaultsMixin:
    """Needs from ``ChaosRun``: the supervisor, the seed, the data directory, the stop events
    and the bookkeeping methods."""

    sup: RunningSupervisor
    seed: int
    data_dir: Path
    read_location: str
    fault_gap: tuple[float, float]
    stop_load: threading.Event
    stop_faults: threading.Event
    seen_shards: set[int]
    sup_lock: threading.Lock
    exclusive: threading.Lock
    forced_done: threading.Event

    def violation(self, text: str) -> None:
        raise NotImplementedError

    def count(self, name: str, n: int = 1) -> None:
        raise NotImplementedError

    def _start(self, client: Any, wf_type: str, wid: str, args: tuple[Any, ...], expect: tuple[str, Any]) -> None:
        raise NotImplementedError

    def _track_shards(self) -> list[int]:
        process = self.sup.process
        pids = [] if process is None or process.poll() is not None else shard_pids(process.pid)
        self.seen_shards.update(pids)
        return pids

    def _faults(self) -> None:
        rng = random.Random(f"{self.seed}-faults")
        kinds = ("kill", "stall", "short_stall", "crash", "drain", "hung", "lock_stall", "takeover")
        weights = (44, 32, 8, 9, 7, 8, 6, 3)
        # Each fault-isolation fault once early, so that even the short CI budget has them.
        forced = {1: "hung", 2: "takeover", 3: "lock_stall"}
        takeovers = 0
        index = -1
        store = getattr(self, "store_faults", None)  # disk full, read-only; or chaos_postgres's
        store_kinds: tuple[str, ...] = ()
        if store is not None and store.available:
            store_kinds = store.kinds
            kinds, weights = kinds + store.kinds, weights + store.weights
            # The store's own first, from the very first fault: a PostgreSQL takeover fault
            # takes most of the CI budget, so a random one must not come before them.
            early = list(store.forced) + [forced[i] for i in sorted(forced)]
            forced = {i if store.forced else i + 1: kind for i, kind in enumerate(early)}
        clock = getattr(self, "clock_faults", None)  # chaos_faults_clock: wall-clock jumps
        if clock is not None and clock.available:
            kinds, weights = kinds + ("clock_jump",), weights + (8,)
            forced[max(forced) + 1] = "clock_jump"
        while not self.stop_faults.wait(rng.uniform(*self.fault_gap)):
            index += 1
            if not any(i >= index for i in forced):
                self.forced_done.set()
            kind = rng.choices(kinds, weights)[0]
            kind = forced.get(index, kind)
            pids = [pid for pid in self._track_shards() if _proc_stat(pid) is not None and _proc_stat(pid)[0] != "T"]
            if kind in ("kill", "stall", "short_stall", "hung", "lock_stall", "takeover") and len(pids) < 2:
                if index in forced:
                    _defer(forced, index, kind)
                continue  # keep one shard serving: the supervisor's backoff may hold the others
            if kind in ("stall", "hung"):
                # Only a shard whose engine is registered and live: one still starting up would
                # register after the stall with a fresh lease, and rightly not be deposed.
                live = self._live_engine_pids()
                pids = [pid for pid in pids if pid in live]
                if not pids:
                    if index in forced:
                        _defer(forced, index, kind)
                    continue
            if kind in store_kinds and store.exclusive:
                # Alone: a hung shard's kill bound or a poison's quarantine assume a working store.
                if self.exclusive.acquire(timeout=20 if index in forced else 8):
                    try:
                        store.run(kind, rng, pids, self.sup, lambda name: self.summary.errors.update([f"fault:{name}"]), self.violation)
                    finally:
                        self.exclusive.release()
                elif index in forced:
                    _defer(forced, index, kind)
            elif kind in store_kinds:
                store.run(kind, rng, pids, self.sup, lambda name: self.summary.errors.update([f"fault:{name}"]), self.violation)
            elif kind == "kill":
                victim = rng.choice(pids)
                os.kill(victim, signal.SIGKILL)
                self.count("kills")
            elif kind in ("stall", "short_stall"):
                self._stall(rng.choice(pids), rng.uniform(EXPIRY + 0.3, EXPIRY + 1.5) if kind == "stall" else rng.uniform(0.1, TTL / 2))
            elif kind == "hung":
                self._hung(rng.choice(pids))
            elif kind == "clock_jump":
                # Alone (no kill, stall or poison meanwhile): any shard lost is the jump's doing.
                if self.exclusive.acquire(timeout=20 if index in forced else 8):
                    try:
                        hold = rng.uniform(3 * TTL, 3 * TTL + 3.0)
                        self._naps_across(rng, index, hold)
                        clock.run(rng, hold, self._track_shards, self._live_engine_pids, self.sup, self.count, self.violation)
                    finally:
                        self.exclusive.release()
                elif index in forced:
                    _defer(forced, index, kind)
            elif kind in ("lock_stall", "takeover"):
                # Alone: no poison meanwhile, whose lost owners would blur "no other shard removed".
                if not self.exclusive.acquire(timeout=20 if index in forced else 8):
                    if index in forced:
                        _defer(forced, index, kind)
                    continue
                try:
                    if kind == "lock_stall":
                        happened = self._lock_stall(rng)
                    else:
                        first, most = getattr(store, "takeover_sizes", (300, 2000))
                        size = first if takeovers == 0 else rng.randint(first, most)
                        happened = self._large_takeover(rng, size, takeovers)
                        takeovers += 1
                finally:
                    self.exclusive.release()
                if not happened and index in forced:
                    _defer(forced, index, kind)
            else:
                with self.sup_lock:
                    if kind == "crash":
                        self._kill_everything()
                        self.count("crash_restarts")
                    else:
                        code = self._terminate()
                        if code != 0:
                            self.violation(f"a drain under load exited {code}, not 0")
                        self.count("drain_restarts")
                    self.sup.start()
            self._track_shards()

    def _naps_across(self, rng: random.Random, index: int, hold: float) -> None:
        """Timers due during a clock fault's hold: none may wake before its wall-clock time."""
        from weft_actors import Client

        with Client(self.sup.endpoint, timeout=3.0) as client:
            for k in range(4):
                # Due inside the hold: the clock steps back a second after these start.
                seconds = round(rng.uniform(1.5, max(1.6, hold + 0.7)), 3)
                self._start(client, "napper", f"nap-{self.seed}-fault{index}-{k}", (seconds,), ("nap", (seconds, time.monotonic(), True)))
                self.count("naps")

    def _stall(self, pid: int, seconds: float) -> None:
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass  # the supervisor killed it as hung (silent for a ttl) and reaped it
        self.count("stalls")
        if seconds <= EXPIRY + 0.2:
            return
        self.count("long_stalls")
        # Its lease expired while it was stopped: the supervisor killed it as hung, or at its
        # next heartbeat or commit it finds itself deposed and exits; the slot restarts.
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            self.violation(f"shard {pid} stalled {seconds:.2f}s (past its lease) and still runs 10s after SIGCONT")
        else:
            self.count("deposed_exits")

    def _live_engine_pids(self) -> set[int]:
        try:
            with open_reader(self.read_location) as store:
                now = store.clock.lease_now()  # leases are judged on the lease clock
                return {
                    record["pid"]
                    for record in store.engines().values()
                    if record.get("state") == "live" and record["expires_at"] > now
                }
        except WeftError:
            return set()

    def _epochs(self) -> None:
        """Sample every claim epoch about twice a second: none may ever shrink or vanish."""
        from weft_actors.store._keys import unpack_u64

        previous: dict[bytes, int] = {}
        while not self.stop_load.wait(0.5):
            try:
                if is_store_url(self.read_location):
                    epochs = claim_epochs(self.read_location)
                else:
                    with open_reader(self.read_location) as store, store.env.begin() as txn:
                        epochs = {bytes(key): unpack_u64(value)[0] for key, value in txn.cursor(db=store.dbs.claim_epoch)}
            except (WeftError, psycopg_errors()):
                continue
            self.count("epoch_samples")
            for key, epoch in previous.items():
                now = epochs.get(key)
                if now is None or now < epoch:
                    self.violation(f"claim epoch of {key.decode()!r} went from {epoch} to {now}")
            previous = epochs


    def _terminate(self) -> int:
        """SIGTERM (drain) the supervisor; its exit code (-9 if it had to be killed)."""
        process = self.sup.process
        assert process is not None
        self._track_shards()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            self._kill_everything()
            return -9
        self._reap_strays()
        return code

    def _kill_everything(self) -> None:
        """kill -9 the supervisor and every shard it has (a machine crash)."""
        process = self.sup.process
        if process is None:
            return
        if process.poll() is None:
            pids = self._track_shards()
            process.kill()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        process.wait(30)
        self._reap_strays()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        self.sup.ready_line = ""  # its pids are stale: RunningSupervisor.kill must not use them

    def _reap_strays(self) -> None:
        """Shards left without their supervisor drain and exit by themselves; wait for that,
        then kill any still there (a shard spawned at the instant its supervisor died)."""
        deadline = time.monotonic() + 10
        strays = [pid for pid in self.seen_shards if _alive(pid) and _is_shard(pid)]
        while strays and time.monotonic() < deadline:
            time.sleep(0.05)
            strays = [pid for pid in strays if _alive(pid) and _is_shard(pid)]
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.seen_shards = {pid for pid in self.seen_shards if _alive(pid)}
