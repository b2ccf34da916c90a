"""What a chaos run counts and reports, and the client-side record of one accumulator."""

from __future__ import annotations

import dataclasses
from collections import Counter

__all__ = ["Summary", "Acc", "GaveUp"]


@dataclasses.dataclass
class Summary:
    seed: int
    seconds: float
    runs: int = 1
    kills: int = 0
    stalls: int = 0
    long_stalls: int = 0
    deposed_exits: int = 0
    crash_restarts: int = 0
    drain_restarts: int = 0
    workflows: int = 0
    children: int = 0
    continued: int = 0
    signals: int = 0
    updates: int = 0
    queries: int = 0
    cancels: int = 0
    terminates: int = 0
    retries: int = 0
    duplicates: int = 0
    epoch_samples: int = 0
    checker_runs: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)
    errors: Counter[str] = dataclasses.field(default_factory=Counter)
    elapsed: float = 0.0

    def line(self) -> str:
        return (
            f"chaos seed={self.seed} seconds={self.seconds:g} runs={self.runs} kills={self.kills} "
            f"stalls={self.stalls} (past ttl {self.long_stalls}, deposed exits {self.deposed_exits}) "
            f"restarts={self.crash_restarts + self.drain_restarts} (crash {self.crash_restarts}, drain {self.drain_restarts}) "
            f"workflows={self.workflows} children={self.children} continued={self.continued} "
            f"signals={self.signals} updates={self.updates} queries={self.queries} cancels={self.cancels} "
            f"terminates={self.terminates} retries={self.retries} "
            f"maybe-applied-duplicates={self.duplicates} epoch-samples={self.epoch_samples} "
            f"checker-runs={self.checker_runs} violations={len(self.violations)} elapsed={self.elapsed:.1f}s"
        )

    def merge(self, other: Summary) -> None:
        for field in dataclasses.fields(self):
            if field.name in ("seed", "seconds"):
                continue
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            elif isinstance(mine, Counter):
                mine.update(theirs)
            else:
                setattr(self, field.name, mine + theirs)


@dataclasses.dataclass
class Acc:
    wid: str
    n: int
    closes_after: int
    values: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.values.values())


class GaveUp(Exception):
    """A request kept failing past the run's hard deadline."""
