"""Per-engine counters of ownership and maintenance, read in-process through ``Engine.stats()``.

Labels are small closed sets (claim outcomes, wake kinds); a workflow id is never a label.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["EngineMetrics", "CLAIM_OUTCOMES"]

CLAIM_OUTCOMES: Final = ("acquired", "takeover", "lost_race", "deposed")


class EngineMetrics:
    """Counters only: incremented on the loop thread, read by ``snapshot()``."""

    __slots__ = (
        "claim_attempts",
        "heartbeat_failures",
        "wakes_discarded",
        "reclaim_passes",
        "reclaim_seconds_sum",
        "reclaim_seconds_max",
        "reclaim_seconds_last",
        "feed_lag",
        "feed_pruned",
        "engines_pruned",
        "histories_pruned",
        "workflows_completed",
        "drive_failures",
        "workflows_quarantined",
        "outcomes_reused",
        "outcomes_dropped",
    )

    def __init__(self) -> None:
        self.claim_attempts: dict[str, int] = dict.fromkeys(CLAIM_OUTCOMES, 0)
        self.heartbeat_failures = 0
        self.wakes_discarded: dict[str, int] = {"timer": 0, "signal": 0}
        self.reclaim_passes = 0
        self.reclaim_seconds_sum = 0.0
        self.reclaim_seconds_max = 0.0
        self.reclaim_seconds_last = 0.0
        self.feed_lag = 0
        self.feed_pruned = 0
        self.engines_pruned = 0
        self.histories_pruned = 0
        self.workflows_completed = 0
        self.drive_failures = 0
        self.workflows_quarantined = 0
        self.outcomes_reused = 0
        """Activity attempts not run again: they took the outcome their refused commit carried."""
        self.outcomes_dropped = 0
        """Such kept outcomes dropped past the bound (``_reuse``): those attempts run again."""

    def claim(self, outcome: str, n: int = 1) -> None:
        self.claim_attempts[outcome] += n

    def wake_discarded(self, kind: str) -> None:
        self.wakes_discarded[kind] = self.wakes_discarded.get(kind, 0) + 1

    def reclaim_pass(self, seconds: float) -> None:
        self.reclaim_passes += 1
        self.reclaim_seconds_sum += seconds
        self.reclaim_seconds_last = seconds
        if seconds > self.reclaim_seconds_max:
            self.reclaim_seconds_max = seconds

    def snapshot(self) -> dict[str, Any]:
        attempts = dict(self.claim_attempts)
        return {
            "claim_attempts_total": attempts,
            "heartbeat_failures_total": self.heartbeat_failures,
            "wakes_discarded_total": dict(self.wakes_discarded),
            "reclaim_pass_seconds": {
                "last": self.reclaim_seconds_last,
                "max": self.reclaim_seconds_max,
                "sum": self.reclaim_seconds_sum,
                "count": self.reclaim_passes,
            },
            "feed_lag": self.feed_lag,
            "feed_pruned_total": self.feed_pruned,
            "engines_pruned_total": self.engines_pruned,
            "histories_pruned_total": self.histories_pruned,
            "drive_failures_total": self.drive_failures,
            "workflows_quarantined_total": self.workflows_quarantined,
            "activity_outcomes_reused_total": self.outcomes_reused,
            "activity_outcomes_dropped_total": self.outcomes_dropped,
            "workflows_completed": self.workflows_completed,
            # Flat names of the first version, kept for readers that still use them.
            "claims_acquired": attempts["acquired"],
            "claims_takeover": attempts["takeover"],
            "claims_lost_race": attempts["lost_race"],
            "claims_deposed": attempts["deposed"],
            "heartbeat_failures": self.heartbeat_failures,
        }
