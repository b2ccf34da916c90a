"""``python -m weft_actors``: client commands (``weft_actors.cli``) and operator commands on
a data directory (``weft_actors.admin``: backup, purge, replay; ``cli.main`` hands them on)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
