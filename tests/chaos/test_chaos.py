"""Chaos under continuous load through the real supervisor (``chaos_harness``): kill -9,
SIGSTOP/SIGCONT past the lease, supervisor crashes and drains; then every workflow's result
is exact and the invariant checker is clean.

The budget is short by default (CI); ``WEFT_CHAOS_SECONDS`` runs it longer, and
``WEFT_CHAOS_SEED`` replays a seed (printed in the summary line and in any failure).
For many or long runs, call the harness directly: ``python tests/chaos/chaos_harness.py --help``.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_harness import ChaosRun  # noqa: E402

SECONDS = float(os.environ.get("WEFT_CHAOS_SECONDS") or 45)
SEED = int(os.environ.get("WEFT_CHAOS_SEED") or random.randrange(1 << 31))


@pytest.mark.timeout(SECONDS + 300)
def test_nothing_is_lost_or_committed_twice_under_kills_stalls_and_restarts(tmp_path, request):
    summary = ChaosRun(tmp_path / "data", SEED, SECONDS).run()
    lines = getattr(request.config, "weft_chaos_summaries", [])
    lines.append(summary.line())
    request.config.weft_chaos_summaries = lines
    report = summary.line() + "\n" + "\n".join(summary.violations[:40]) + f"\nreplay: WEFT_CHAOS_SEED={SEED}"
    assert not summary.violations, report
    assert summary.workflows >= 100 and summary.signals >= 100 and summary.updates >= 20, report
    assert summary.kills + summary.stalls + summary.crash_restarts + summary.drain_restarts >= 5, report
    assert summary.checker_runs == 2, report
