"""``python -m weft_actors``: the client command line (see ``weft_actors.cli``)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
