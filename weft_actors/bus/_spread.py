"""Where a direct client sends a start without an id: to the shard holding the fewest of its
requests unanswered.

Any shard may take such a start (it names the new workflow), so the choice is only about
load. In turn, each shard got half of every loop turn's new starts, and a shard deep in a long
commit pass held its half queued while the other, done with its own pass, sat idle waiting for
work: on 2 shards and 2 cores one shard ran alone about 29 % of the time. The shard with the
fewest requests out has the least queued ahead of a new one (join the shortest queue); ties
go in turn, so an idle client still spreads its starts evenly.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sized

__all__ = ["least_held"]


class Held(Protocol):
    """A shard's socket as the client sees it: requests queued, and sent not answered."""

    @property
    def outbox(self) -> Sized: ...

    @property
    def sent(self) -> Sized: ...


def least_held(engines: list[str], shards: Mapping[str, Held], turn: int) -> str:
    """The engine among ``engines`` (not empty) whose socket holds the fewest requests; among
    equals, the first from ``turn`` on. An engine with no socket open yet holds none."""
    count = len(engines)
    best = engines[turn % count]
    if count == 1:
        return best
    shard = shards.get(best)
    fewest = 0 if shard is None else len(shard.outbox) + len(shard.sent)
    for step in range(1, count):
        engine_id = engines[(turn + step) % count]
        shard = shards.get(engine_id)
        held = 0 if shard is None else len(shard.outbox) + len(shard.sent)
        if held < fewest:
            best, fewest = engine_id, held
    return best
