"""Where a shard's workflows go when its supervisor stops (``SIGTERM``): to a live peer.

A plain stop releases every claim, and the activity attempts in flight run again on whichever
engine's reclaim pass takes the workflows. When another live engine, outside this supervisor,
runs every workflow type of the app (on PostgreSQL: another supervisor's shard), the shard
hands off to it instead (``Engine.hand_off``): its running attempts finish within the grace,
and the claims move fenced, so none runs twice. The other shards of the same supervisor are
stopping too (``siblings``), so they are never chosen; with no peer left (one supervisor, or
LMDB), the shard releases as before.

One successor per shard, chosen by rendezvous on the shard's own engine id among the peers
that run its app's types: the shards of a stopping host spread over the survivor's shards,
and the choice needs no coordination. (Per-workflow placement would spread a shard's
workflows finer, at one handoff transaction per successor; the survivor's own reclaim and
eviction even the load out later.) The successor hears of its workflows by the handoff's
durable marks (``store._handed``), at its next reclaim pass: no control pipe reaches it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Collection

from .._placement import preferred
from ..errors import WeftError
from ..store import offered_types

if TYPE_CHECKING:
    from ..shard import Engine

__all__ = ["successor_of"]

log = logging.getLogger("weft_actors.supervisor")


def successor_of(engine: Engine, siblings: Collection[str]) -> str | None:
    """The live engine ``engine`` should hand its workflows to as its supervisor stops: not
    itself, not one of ``siblings`` (stopping with it), registered as running every type of
    its app (an engine whose record does not list its types is not chosen); None
    if there is none (or the registry cannot be read): then it releases, as at any stop."""
    try:
        records = engine.store.live_engines()
    except WeftError as exc:
        log.warning("engine %s: cannot read the live engines (%s); releasing its workflows", engine.engine_id, exc)
        return None
    needed = set(engine.app_types)
    peers = []
    for engine_id, record in records.items():
        if engine_id == engine.engine_id or engine_id in siblings:
            continue
        runs = offered_types(record)
        if runs is not None and needed <= runs:  # one that does not say what it runs is not chosen
            peers.append(engine_id)
    return preferred(engine.engine_id, peers)
