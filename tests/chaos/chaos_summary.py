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
    naps: int = 0
    """Timer workflows whose wake was checked against the wall clock (never early)."""
    naps_unjudged: int = 0
    """Naps due near a backward clock step, whose early look could be the step's doing."""
    limited: int = 0
    """Starts of a type under flow control (two at a time per key)."""
    retries: int = 0
    duplicates: int = 0
    epoch_samples: int = 0
    checker_runs: int = 0
    # the fault-isolation faults
    poisons: int = 0
    quarantined: int = 0
    quarantine_lifted: int = 0
    quarantine_terminated: int = 0
    quarantine_samples: int = 0
    innocents_quarantined: int = 0
    """Workflows seen quarantined that the injector did not make poison (each a violation)."""
    user_exits: int = 0
    hung_faults: int = 0
    hung_kills: int = 0
    """Stopped shards (hung, lock stalls) the harness saw the supervisor kill."""
    supervisor_hung_kills: int = 0
    """Every shard the supervisor killed as hung (its log): poisons' and stalls' owners too."""
    hung_kill_max_s: float = 0.0
    lock_stalls: int = 0
    large_takeovers: int = 0
    clock_jumps: int = 0
    takeover_workflows: int = 0
    takeover_max_s: float = 0.0
    takeover_max_loop_stall_s: float = 0.0
    supervisor_exits: int = 0
    shard_exits: Counter[str] = dataclasses.field(default_factory=Counter)
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
            f"terminates={self.terminates} naps={self.naps} (unjudged {self.naps_unjudged}) limited={self.limited} retries={self.retries} "
            f"maybe-applied-duplicates={self.duplicates} epoch-samples={self.epoch_samples} "
            f"checker-runs={self.checker_runs} "
            f"poisons={self.poisons} (quarantined {self.quarantined}, lifted {self.quarantine_lifted}, terminated {self.quarantine_terminated}; "
            f"innocents quarantined {self.innocents_quarantined} in {self.quarantine_samples} samples) "
            f"user-exits={self.user_exits} hung={self.hung_faults} lock-stalls={self.lock_stalls} "
            f"(killed {self.hung_kills}, slowest {self.hung_kill_max_s:.2f}s; supervisor hung kills {self.supervisor_hung_kills}) "
            f"large-takeovers={self.large_takeovers} clock-jumps={self.clock_jumps} "
            f"(workflows {self.takeover_workflows}, slowest {self.takeover_max_s:.2f}s, loop stall {self.takeover_max_loop_stall_s:.2f}s) "
            f"shard-exits={dict(sorted(self.shard_exits.items()))} supervisor-exits={self.supervisor_exits} "
            f"violations={len(self.violations)} elapsed={self.elapsed:.1f}s"
        )

    def merge(self, other: Summary) -> None:
        for field in dataclasses.fields(self):
            if field.name in ("seed", "seconds"):
                continue
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if field.name.endswith("_max_s") or field.name.endswith("_stall_s"):
                setattr(self, field.name, max(mine, theirs))
            elif isinstance(mine, list):
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
