"""``python -m weft_actors.check --data DIR``: check a store's invariants.

Meant for a stopped store (it also runs beside live engines, but then in-flight work may
look briefly inconsistent). Prints each problem; exits 1 if there is any, 0 if none.
"""

from __future__ import annotations

import argparse
import sys
import time

from .errors import WeftError
from .store import check_store

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m weft_actors.check", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="./weft-data", help="data directory (default ./weft-data)")
    parser.add_argument("--feed-retention", type=float, default=3600.0, help="seconds (as configured on the engines)")
    args = parser.parse_args(argv)
    try:
        problems = check_store(args.data, time.time(), args.feed_retention)
    except WeftError as exc:
        sys.stderr.write(f"error: {exc.code}: {exc}\n")
        return 2
    for problem in problems:
        sys.stdout.write(f"{problem}\n")
    sys.stdout.write(f"{len(problems)} problem(s) found in {args.data}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
