"""``python -m weft_actors.check --data DIR|URL``: check a store's invariants.

Meant for a stopped store (it also runs beside live engines, but then in-flight work may
look briefly inconsistent). Prints each problem, including every record it cannot read;
exits 1 if there is any, 0 if none, 2 if the store cannot be opened or read at all.

The store is read in a child process: LMDB maps ``data.mdb`` into memory, so a truncated or
garbled file can kill its reader with a signal (SIGBUS, SIGSEGV) instead of raising, and the
checker must still say what happened. A ``postgresql://`` URL is checked by the same code, on
one read transaction of the database.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import time
from typing import Any

from .errors import WeftError
from .store import check_store, describe_location, is_store_url

__all__ = ["main"]


def _child(conn: Any, location: str, now: float, feed_retention: float) -> None:
    try:
        conn.send(("ok", check_store(location, now, feed_retention)))
    except WeftError as exc:
        conn.send(("error", f"{exc.code}: {exc}"))
    except Exception as exc:  # whatever a damaged store raises, say it in one line
        conn.send(("error", f"cannot read the store: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _run_check(location: str, feed_retention: float) -> tuple[str, Any]:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(child, location, time.time(), feed_retention), daemon=True)
    process.start()
    child.close()
    try:
        outcome = parent.recv()
    except EOFError:  # the child died before it answered
        outcome = None
    process.join()
    if outcome is not None:
        return outcome
    code = process.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        if is_store_url(location):  # nothing of the database is mapped into the reader
            return "error", f"the reader was killed by {name} before it answered"
        return "error", f"reading the store killed its reader with {name}: data.mdb is truncated or garbled; restore it from a backup"
    return "error", f"the reader exited with code {code} before it answered"


def _shown(location: str) -> str:
    """``location`` as the summary names it: a directory as given, a URL without its password."""
    return describe_location(location) if is_store_url(location) else location


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m weft_actors.check", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="./weft-data", metavar="DIR|URL", help="data directory or postgresql:// URL (default ./weft-data)")
    parser.add_argument("--feed-retention", type=float, default=3600.0, help="seconds (as configured on the engines)")
    args = parser.parse_args(argv)
    status, found = _run_check(args.data, args.feed_retention)
    if status == "error":
        sys.stderr.write(f"error: {found}\n")
        return 2
    for problem in found:
        sys.stdout.write(f"{problem}\n")
    sys.stdout.write(f"{len(found)} problem(s) found in {_shown(args.data)}\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
