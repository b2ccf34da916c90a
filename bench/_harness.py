"""Shared pieces of the benchmarks: a real supervisor on a free loopback port and a temporary
data directory (always killed and reaped), CPU accounting from /proc, percentiles, and a
read-only look at the store once the numbers are in.

Only public surfaces are used: the supervisor CLI and its ready line, ``Client``/``AsyncClient``,
and ``LmdbStore(path, readonly=True)`` for facts the wire does not carry (read, never written).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

BENCH = os.path.dirname(os.path.abspath(__file__))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1); 0.0 for an empty list."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[index]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (all its threads), 0.0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def system_busy_seconds() -> float:
    """CPU seconds spent by the whole machine so far (all cores, everything but idle and
    iowait). Minus the CPU of our own processes it shows what others took meanwhile: on a
    shared machine that is how a disturbed measurement is recognised."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def wait_quiet(max_wait: float = 60.0, busy_limit: float = 0.3) -> float:
    """Wait (at most ``max_wait`` s) until the machine is quiet: less than ``busy_limit`` of
    one core busy over a 1 s sample. Returns the last busy fraction seen."""
    deadline = time.monotonic() + max_wait
    while True:
        before = system_busy_seconds()
        time.sleep(1.0)
        busy = system_busy_seconds() - before
        if busy < busy_limit or time.monotonic() > deadline:
            if busy >= busy_limit:
                sys.stderr.write(f"note: the machine is busy ({busy:.2f} cores) and stayed so for {max_wait:.0f}s; measuring anyway\n")
            return busy
        sys.stderr.write(f"waiting for a quiet machine ({busy:.2f} cores busy)\r")


def device_sectors_written(path: str) -> int | None:
    """Sectors (512 B) written so far to the block device holding ``path`` (/proc/diskstats):
    what really reached the disk, from every process on the machine."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                fields = line.split()
                if int(fields[0]) == major and int(fields[1]) == minor:
                    return int(fields[9])
    except (FileNotFoundError, ValueError, IndexError):
        pass
    return None


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot): with the pid, it names one
    process, so a recycled pid is never mistaken for a shard of ours."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def supervisor_bench_args(doc: str, workflows: int) -> Any:
    """``--workflows`` and ``--shards`` (default 2) of a bench that drives one supervisor."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=workflows)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    if args.workflows < 1 or args.shards < 1:
        parser.error("--workflows and --shards must be positive")
    return args


def settled_and_present(client: Any, acked: list[str], kinds: tuple[str, ...], wait: float = 120.0) -> tuple[int, int]:
    """(lost, present): how many of the ``acked`` workflow ids gave no result within ``wait``
    seconds in all, and how many workflows of the ``kinds`` types the store lists (more than
    were acknowledged: a duplicate)."""
    lost = 0
    deadline = time.monotonic() + wait
    for wid in acked:
        try:
            client.get_handle(wid).result(timeout=max(1.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - counted
            lost += 1
    present = 0
    for kind in kinds:
        cursor = None
        while True:
            page = client.list(type=kind, limit=1000, cursor=cursor)
            present += len(page["items"])
            cursor = page.get("cursor")
            if not cursor:
                break
    return lost, present


def table(result: dict[str, Any], title: str | None = None) -> None:
    """The readable table of a result, on stderr."""
    if title:
        sys.stderr.write(f"{title}\n")
    for key, value in result.items():
        if isinstance(value, dict):
            value = json.dumps(value)
        sys.stderr.write(f"  {key:<24} {value}\n")
    sys.stderr.flush()


@contextlib.contextmanager
def scratch_dir(given: str | None = None, prefix: str = "weft-bench-") -> Iterator[str]:
    """``given``, or a fresh temporary directory removed on the way out."""
    if given:
        yield given
        return
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def report(result: dict[str, Any], title: str | None = None) -> None:
    """A measurement's readable table on stderr and its one JSON line on stdout."""
    table(result, title)
    print(json.dumps(result), flush=True)


class Supervisor:
    """``python -m weft_actors.supervisor`` on a free port and a fresh temporary data directory.

    Use as a context manager: on exit (error or not) the supervisor and every shard pid it
    reported are killed and reaped and the directory is removed (``keep_data`` keeps it for a
    read-only look: call ``remove_data()`` afterwards).
    """

    def __init__(
        self,
        *,
        shards: int,
        app: str = "bench_app",
        args: tuple[str, ...] = (),
        log_level: str = "WARNING",
        keep_data: bool = False,
        ready_timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.shards = shards
        self.data_dir = tempfile.mkdtemp(prefix="weft-bench-")
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.command = [
            sys.executable, "-m", "weft_actors.supervisor",
            "--shards", str(shards), "--app", app, "--data", self.data_dir,
            "--bind", self.endpoint, "--log-level", log_level, *args,
        ]
        path = os.environ.get("PYTHONPATH", "")
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (BENCH, path) if p), **(env or {})}
        self.keep_data = keep_data
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[str] | None = None
        self.pids: list[int] = []
        self.known_pids: dict[int, int | None] = {}  # pid -> start time when first seen
        self.stderr_lines: list[str] = []

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Supervisor:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env,
            start_new_session=True,  # a ^C at the terminal reaches the bench, which cleans up
        )
        threading.Thread(target=self._collect_stderr, daemon=True).start()
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(self.ready_timeout)
        if not line or "ready" not in line[0]:
            raise RuntimeError(f"supervisor not ready within {self.ready_timeout}s: {line!r}\n" + "".join(self.stderr_lines[-30:]))
        ready = line[0].strip()
        self.pids = [int(p) for p in ready.split("pids=")[1].split(",")]
        for pid in self.pids:
            self._note(pid)
        self._wait_serving()

    def _wait_serving(self, timeout: float = 15.0) -> None:
        """Until every shard answers a request. The ready line can come before the shards'
        sockets have connected to the front door (seen on a loaded machine: the first start
        failed with ServerUnavailable "no shard is available"), so the bench asks each shard
        (``--routing owner`` sends an unknown id to its preferred shard, so several ids are
        tried) for an unknown workflow until all answer WorkflowNotFound."""
        from weft_actors import Client
        from weft_actors.errors import ServerUnavailable, WorkflowNotFound

        deadline = time.monotonic() + timeout
        with Client(self.endpoint, timeout=2) as client:
            answered = 0
            probe = 0
            while answered < 4 * self.shards:
                probe += 1
                try:
                    client.get_handle(f"bench-probe-{probe}").describe()
                    answered += 1
                except WorkflowNotFound:
                    answered += 1
                except ServerUnavailable:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the supervisor printed its ready line but no shard answered within {timeout}s")
                    time.sleep(0.05)

    def _note(self, pid: int) -> None:
        if pid not in self.known_pids:
            self.known_pids[pid] = start_time(pid)

    def _collect_stderr(self) -> None:
        try:
            for line in self.process.stderr:  # type: ignore[union-attr]
                self.stderr_lines.append(line)
                if len(self.stderr_lines) > 5000:
                    del self.stderr_lines[:1000]
        except ValueError:
            pass

    def note_pids(self, stats: dict[str, Any]) -> None:
        """Remember shard pids seen in ``stats()`` (restarted shards get new ones)."""
        for shard in stats.get("shards", []):
            if shard.get("pid"):
                self._note(int(shard["pid"]))

    def terminate(self, timeout: float = 15.0) -> int | None:
        """SIGTERM: the supervisor drains its shards and exits; None if it did not in time."""
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Kill the supervisor and every shard pid we know (checked first), reap, clean up."""
        process = self.process
        if process is not None:
            if process.poll() is None:
                process.kill()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                pass
            ours = [pid for pid, started in self.known_pids.items() if started is not None and start_time(pid) == started]
            for pid in ours:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)  # a SIGSTOPped shard too
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(_alive(pid) for pid in ours):
                time.sleep(0.02)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
            self.process = None
        if not self.keep_data:
            self.remove_data()

    def remove_data(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- measurements ---------------------------------------------------------------------

    def server_pids(self) -> list[int]:
        pids = [] if self.process is None else [self.process.pid]
        return pids + sorted(self.known_pids)

    def cpu(self) -> dict[int, float]:
        return {pid: cpu_seconds(pid) for pid in self.server_pids()}

    def disk_sectors(self) -> int | None:
        return device_sectors_written(self.data_dir)

    def log_tail(self, n: int = 30) -> str:
        return "".join(self.stderr_lines[-n:])


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (shards are reaped by init once their
    supervisor is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def open_store_readonly(data_dir: str) -> Any:
    """The store, read-only (no write transaction is ever begun on it)."""
    from weft_actors.store import LmdbStore

    return LmdbStore(data_dir, readonly=True)


@contextlib.contextmanager
def role_process(script: str, role: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``script --role ROLE ARGS...`` in a child process, yielded with its ``ready ...`` line
    (split) once it printed it; killed and reaped on the way out, whatever happened."""
    child = subprocess.Popen([sys.executable, os.path.abspath(script), "--role", role, *args], stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()  # type: ignore[union-attr]
        if not line or line[0] != "ready":
            raise SystemExit(f"the {role} process did not start: {line!r}")
        yield child, line
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit, so ``finally`` blocks reap what the bench started."""
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
