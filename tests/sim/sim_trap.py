"""A module no simulated engine may ever import: a client payload names it (a type tag of
its class), and decoding must construct only registered classes, never import by name. The
end-of-run check looks for it in ``sys.modules``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Trap:
    pass
