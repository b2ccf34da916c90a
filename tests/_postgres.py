"""A throwaway PostgreSQL server for tests: ``initdb`` in a temporary directory, a free
loopback port, durable settings (fsync and synchronous commit on, as production runs), and
``pg_ctl stop`` at the end.

``initdb`` refuses to run as root, so as root the cluster is made and run by the ``postgres``
user, in a directory it owns; as anyone else, by that user. The binaries come from
``pg_config --bindir`` or the newest ``/usr/lib/postgresql/*/bin``. Without them
``find_bindir`` returns None and the fixture skips (CI installs them: ``.ci/run``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from typing import Any

from _processes import free_port

__all__ = ["PostgresServer", "find_bindir"]


def find_bindir() -> str | None:
    """Where ``initdb`` and ``pg_ctl`` are, or None."""
    candidates = []
    try:
        candidates.append(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: int(path.split("/")[-2]) if path.split("/")[-2].isdigit() else 0, reverse=True)
    for bindir in candidates:
        if bindir and os.access(os.path.join(bindir, "initdb"), os.X_OK) and os.access(os.path.join(bindir, "pg_ctl"), os.X_OK):
            return bindir
    return None


class PostgresServer:
    """Use as a context manager; ``url`` names database ``weft`` as user ``weft`` (trust auth
    on loopback only: the cluster lives as long as the test session)."""

    def __init__(self, bindir: str, settings: dict[str, str] | None = None) -> None:
        self.bindir = bindir
        self.settings = settings or {}
        """Extra server settings (``-c name=value``), e.g. ``shared_preload_libraries``."""
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix="weft-pg-")
        self.data = os.path.join(self.root, "data")
        self.sockets = os.path.join(self.root, "sockets")
        self.log = os.path.join(self.root, "server.log")
        self._as_postgres = os.geteuid() == 0
        self.url = f"postgresql://weft@127.0.0.1:{self.port}/weft"

    def _run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=True, timeout=timeout)

    def __enter__(self) -> PostgresServer:
        os.makedirs(self.sockets)
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            for path in (self.root, self.sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
        bin_ = self.bindir
        try:
            self._run(os.path.join(bin_, "initdb"), "-D", self.data, "-U", "weft", "--auth=trust", "--encoding=UTF8", "--no-instructions")
            self.start()
            self._run(os.path.join(bin_, "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "weft", "weft")
        except subprocess.CalledProcessError as exc:
            self.__exit__()
            raise RuntimeError(f"could not start PostgreSQL: {exc.stderr or exc.stdout}{self._log_tail()}") from None
        return self

    def start(self) -> None:
        """``pg_ctl start``, waiting until it accepts connections (again, after ``stop``)."""
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=100" + "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-l", self.log, "-o", options, "-w", "-t", "60", "start", timeout=90)

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode``: every session ends (``fast``: rolled back at once); the
        server is down until ``start``. How a fault test restarts the database."""
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", timeout=90)

    def _log_tail(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as file:
                return "\n" + "".join(file.readlines()[-20:])
        except OSError:
            return ""

    def __exit__(self, *exc: Any) -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            try:
                self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop", timeout=60)
            except (OSError, subprocess.SubprocessError):
                pass
        shutil.rmtree(self.root, ignore_errors=True)
