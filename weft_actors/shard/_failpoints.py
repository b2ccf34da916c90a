"""Failpoints for crash-consistency tests: end (or stop) the process at a chosen point of a
group commit.

Enabled only by the environment variable ``WEFT_FAILPOINT``, read once when an engine opens
(its committer is built); unset, nothing here runs and a flush pays one attribute check::

    WEFT_FAILPOINT=commit:before[:N]        before the N-th batch reaches the store
    WEFT_FAILPOINT=commit:after-apply[:N]   inside its write transaction, every intent applied,
                                            before the commit (nothing of it is durable)
    WEFT_FAILPOINT=commit:after-commit[:N]  after it committed, before any submitter is called
                                            back (durable, yet nothing acknowledged)

``N`` counts the batches (flushes with at least one intent) of this engine, from 1 (the
default). The process ends with ``os._exit(137)``: no ``finally``, no atexit, no LMDB abort,
as close to ``kill -9`` at that instant as a process can do to itself. A trailing ``:stop``
(``commit:after-apply:3:stop``) stops it with ``SIGSTOP`` instead, a hung process; at
``after-apply`` it then holds the store's write lock until it is continued or killed.

``WEFT_FAILPOINT_ONCE=PATH`` arms the point in one process only: the first to reach it
creates ``PATH`` (its pid inside); any other process, a restarted one included, then passes.
So a supervisor's shards, which all inherit the environment, lose exactly one of theirs.

Never set these in production: they exist so that tests can prove a crash (or a stall) at
each of those points loses nothing acknowledged and leaves the store consistent.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Final, Mapping

__all__ = ["Failpoint", "failpoint_from_env", "ENV_VAR", "ONCE_VAR", "POINTS", "EXIT_CODE"]

ENV_VAR: Final = "WEFT_FAILPOINT"
ONCE_VAR: Final = "WEFT_FAILPOINT_ONCE"
POINTS: Final = ("before", "after-apply", "after-commit")
EXIT_CODE: Final = 137


class Failpoint:
    """One armed point: ``hit(point)`` at each point of each batch; the process dies at the
    armed point of the ``nth`` batch. Built by ``failpoint_from_env`` only."""

    __slots__ = ("point", "nth", "batches", "stop", "once")

    def __init__(self, point: str, nth: int, stop: bool = False, once: str | None = None) -> None:
        self.point = point
        self.nth = nth
        self.batches = 0
        self.stop = stop
        self.once = once

    def batch(self) -> None:
        """A new batch starts (called once per non-empty flush, before ``hit("before")``)."""
        self.batches += 1

    def hit(self, point: str) -> None:
        if point == self.point and self.batches == self.nth:
            if self.once is not None and not self._claim(self.once):
                return
            if self.stop:
                sys.stderr.write(f"weft_actors failpoint commit:{point}:{self.nth} reached: stopping (pid {os.getpid()})\n")
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGSTOP)
                return
            sys.stderr.write(f"weft_actors failpoint commit:{point}:{self.nth} reached: exiting with {EXIT_CODE}\n")
            sys.stderr.flush()
            os._exit(EXIT_CODE)

    @staticmethod
    def _claim(path: str) -> bool:
        """True for the first process to get here (it creates ``path``), False for others."""
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as marker:
            marker.write(str(os.getpid()))
        return True


def failpoint_from_env(environ: Mapping[str, str] | None = None) -> Failpoint | None:
    """The failpoint ``WEFT_FAILPOINT`` arms, or ``None`` (unset or empty). A malformed value
    is a ``ValueError``: a test that meant to crash must not silently run to the end."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    spec = env.get(ENV_VAR, "")
    if not spec:
        return None
    parts = spec.split(":")
    stop = len(parts) == 4 and parts[3] == "stop"
    if stop:
        parts.pop()
    if len(parts) not in (2, 3) or parts[0] != "commit" or parts[1] not in POINTS:
        raise ValueError(f"{ENV_VAR}={spec!r}: expected commit:{'|'.join(POINTS)}[:N[:stop]]")
    nth = 1
    if len(parts) == 3:
        try:
            nth = int(parts[2])
        except ValueError:
            raise ValueError(f"{ENV_VAR}={spec!r}: N must be a positive integer") from None
        if nth < 1:
            raise ValueError(f"{ENV_VAR}={spec!r}: N must be a positive integer")
    return Failpoint(parts[1], nth, stop, env.get(ONCE_VAR) or None)
