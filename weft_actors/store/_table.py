"""The one table of appliers, and the call that goes through it.

Appliers never import each other: when one transition causes another (a child's end reaching
its parent's inbox, a parent closing its children, a freed flow slot going to the head of the
queue), the applier builds the intent of that effect and hands it to ``apply_intent``, which
finds the applier in ``APPLIER_OF``. This module sits below every applier and imports none of
them; ``_dispatch`` fills the table when it is imported (the stores import it before they
apply anything), so the appliers form a fan under one door instead of a circle.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["APPLIER_OF", "apply_intent"]

APPLIER_OF: dict[type, Callable[[Any, Any], Any]] = {}
"""intent type -> the function that applies it; filled once, by ``_dispatch`` at import."""


def apply_intent(state: Any, intent: Any) -> Any:
    """Apply one intent inside ``state``'s transaction; it raises a ``WeftError`` (having
    written nothing) or returns its result."""
    return APPLIER_OF[type(intent)](state, intent)
