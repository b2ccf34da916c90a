"""Starting a real supervisor for integration tests: free port, temporary data, always reaped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunningSupervisor:
    """A ``python -m weft_actors.supervisor`` child; use as a context manager."""

    def __init__(self, data_dir: Path | str, *, shards: int = 2, app: str = "weft_actors.examples", args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.command = [
            sys.executable, "-m", "weft_actors.supervisor",
            "--shards", str(shards), "--app", app, "--data", str(data_dir),
            "--bind", self.endpoint, "--log-level", "INFO", *args,
        ]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]), **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.ready_line = ""
        self.stderr_lines: list[str] = []

    def __enter__(self) -> RunningSupervisor:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def start(self, timeout: float = 30.0, *, wait_ready: bool = True) -> None:
        """Start it and wait for its ready line (all shards ready), unless ``wait_ready`` is
        False (then read it later with ``wait_ready_line``)."""
        # A session of its own: kill() reaches every shard, restarted ones included.
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env, start_new_session=True
        )
        threading.Thread(target=self._collect_stderr, daemon=True).start()
        if wait_ready:
            self.wait_ready_line(timeout)

    def wait_ready_line(self, timeout: float = 30.0) -> None:
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self.process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not ready or "ready" not in ready[0]:
            self.kill()
            raise AssertionError(f"supervisor not ready within {timeout}s: {ready!r}\n" + "".join(self.stderr_lines[-40:]))
        self.ready_line = ready[0].strip()

    def _collect_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        try:
            for line in self.process.stderr:
                self.stderr_lines.append(line)
        except ValueError:  # closed by kill()
            pass

    @property
    def shard_pids(self) -> list[int]:
        return [int(p) for p in self.ready_line.split("pids=")[1].split(",")]

    def terminate(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def kill(self) -> None:
        """Kill the supervisor and every shard it spawned (its whole process group), then reap."""
        process = self.process
        if process is None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()

    def log_text(self) -> str:
        return "".join(self.stderr_lines)

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the supervisor's whole process group (it and every shard): how a
        host is frozen (SIGSTOP), thawed (SIGCONT) or crashed (SIGKILL) at once."""
        assert self.process is not None
        os.killpg(self.process.pid, signum)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a shard orphaned by its killed supervisor
    lingers as one until init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def wait_until(predicate: Any, timeout: float = 10.0, what: str = "condition", interval: float = 0.02) -> Any:
    """The truthy value of ``predicate()``, polled until ``timeout`` (the blocking twin of
    ``_support.eventually``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)
