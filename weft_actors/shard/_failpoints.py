"""Failpoints for crash-consistency tests: end the process at a chosen point of a group commit.

Enabled only by the environment variable ``WEFT_FAILPOINT``, read once when an engine opens
(its committer is built); unset, nothing here runs and a flush pays one attribute check::

    WEFT_FAILPOINT=commit:before[:N]        before the N-th batch reaches the store
    WEFT_FAILPOINT=commit:after-apply[:N]   inside its write transaction, every intent applied,
                                            before the commit (nothing of it is durable)
    WEFT_FAILPOINT=commit:after-commit[:N]  after it committed, before any submitter is called
                                            back (durable, yet nothing acknowledged)

``N`` counts the batches (flushes with at least one intent) of this engine, from 1 (the
default). The process ends with ``os._exit(137)``: no ``finally``, no atexit, no LMDB abort,
as close to ``kill -9`` at that instant as a process can do to itself. Never set it in
production: it exists so that tests can prove a crash at each of those points loses nothing
acknowledged and leaves the store consistent.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["Failpoint", "failpoint_from_env", "ENV_VAR", "POINTS", "EXIT_CODE"]

ENV_VAR: Final = "WEFT_FAILPOINT"
POINTS: Final = ("before", "after-apply", "after-commit")
EXIT_CODE: Final = 137


class Failpoint:
    """One armed point: ``hit(point)`` at each point of each batch; the process dies at the
    armed point of the ``nth`` batch. Built by ``failpoint_from_env`` only."""

    __slots__ = ("point", "nth", "batches")

    def __init__(self, point: str, nth: int) -> None:
        self.point = point
        self.nth = nth
        self.batches = 0

    def batch(self) -> None:
        """A new batch starts (called once per non-empty flush, before ``hit("before")``)."""
        self.batches += 1

    def hit(self, point: str) -> None:
        if point == self.point and self.batches == self.nth:
            sys.stderr.write(f"weft_actors failpoint commit:{point}:{self.nth} reached: exiting with {EXIT_CODE}\n")
            sys.stderr.flush()
            os._exit(EXIT_CODE)


def failpoint_from_env(environ: dict[str, str] | None = None) -> Failpoint | None:
    """The failpoint ``WEFT_FAILPOINT`` arms, or ``None`` (unset or empty). A malformed value
    is a ``ValueError``: a test that meant to crash must not silently run to the end."""
    spec = (os.environ if environ is None else environ).get(ENV_VAR, "")
    if not spec:
        return None
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[0] != "commit" or parts[1] not in POINTS:
        raise ValueError(f"{ENV_VAR}={spec!r}: expected commit:{'|'.join(POINTS)}[:N]")
    nth = 1
    if len(parts) == 3:
        try:
            nth = int(parts[2])
        except ValueError:
            raise ValueError(f"{ENV_VAR}={spec!r}: N must be a positive integer") from None
        if nth < 1:
            raise ValueError(f"{ENV_VAR}={spec!r}: N must be a positive integer")
    return Failpoint(parts[1], nth)
