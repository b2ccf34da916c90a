"""The successor's side of a handoff's durable mark (``store._handed``): each reclaim pass
reads the marks left for this engine, makes their workflows orphans (driven by the same pass
if still held here at their epoch and not running: ``Reclaimer._retry_orphans``, as a wake
does), and clears them. A handoff's wake (``Engine.adopt``) is the fast path; this pass is
what drives a handed workflow whose wake was lost.

Costs one short range read per pass with no mark, and one write per pass that found some.
"""

from __future__ import annotations

import logging
from typing import Any, Collection, Protocol

from ..errors import EngineDeposed, WeftError
from ..store import clear_handed, handed_to

__all__ = ["adopt_marked"]

log = logging.getLogger("weft_actors.shard")


class _Engine(Protocol):
    """What reading the marks needs of an engine (a ``ReclaimHost`` has it)."""

    @property
    def engine_id(self) -> str: ...
    @property
    def store(self) -> Any: ...
    @property
    def actors(self) -> Collection[str]: ...
    @property
    def orphans(self) -> set[str]: ...


def adopt_marked(engine: _Engine) -> int:
    """Make orphans of the workflows marked as handed to ``engine`` that it does not run yet,
    and clear the marks read; how many it had not been woken for. A store that refuses the
    read or the clear leaves the marks for the next pass; ``EngineDeposed`` if this engine
    is no longer live."""
    try:
        marked = handed_to(engine.store, engine.engine_id)
    except WeftError as exc:
        log.warning("engine %s: could not read its handoff marks: %s", engine.engine_id, exc)
        return 0
    if not marked:
        return 0
    actors, orphans = engine.actors, engine.orphans
    unwoken = [wid for wid in marked if wid not in actors and wid not in orphans]
    orphans.update(unwoken)
    if unwoken:
        log.info("engine %s: %d handed workflows found by their marks (no wake came)", engine.engine_id, len(unwoken))
    try:
        clear_handed(engine.store, engine.engine_id, marked)
    except EngineDeposed:
        raise  # the pass deposes the engine
    except WeftError as exc:
        log.warning("engine %s: could not clear %d handoff marks: %s", engine.engine_id, len(marked), exc)
    return len(unwoken)
