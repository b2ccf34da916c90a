"""``python -m weft_actors``: client commands (``weft_actors.cli``) and operator commands on
a data directory (``weft_actors.admin``: backup, purge, replay)."""

from __future__ import annotations

import sys


def _first_positional(argv: list[str]) -> str | None:
    args = iter(argv)
    for arg in args:
        if arg in ("--data", "--endpoint", "--timeout", "--curve-server-key", "--curve-key"):
            next(args, None)  # that option's value
        elif not arg.startswith("-"):
            return arg
    return None


def _main(argv: list[str]) -> int:
    from . import admin

    if _first_positional(argv) in admin.COMMANDS:
        return admin.main(argv)
    from .cli import main

    return main(argv)


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
