"""The chaos harness on PostgreSQL (``chaos_postgres``): the same load, faults and verdict as
``test_chaos``, with the store on a dedicated server behind a pausable proxy and the database
itself as a fault: backends terminated (``pg_terminate_backend``), the server restarted
(``pg_ctl stop``/``start``) and the network to it cut (the proxy paused). Every workflow's
result is exact, the supervisor never exits, the checker is clean, no workflow is
quarantined that the injector did not make poison. Shards killed as hung during or right
after a database fault are counted (``fault:silent_kill`` in the report), not yet failed on.

The budget is short by default (CI: 25 s of load and faults, about 45 s in all on two cores);
``WEFT_CHAOS_PG_SECONDS`` runs it longer and ``WEFT_CHAOS_SEED`` replays a seed. Long runs:
``python tests/chaos/chaos_harness.py --postgres``. Skipped where PostgreSQL is not installed.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_harness import ChaosRun  # noqa: E402
from chaos_postgres import PG_KINDS, postgres_available  # noqa: E402

SECONDS = float(os.environ.get("WEFT_CHAOS_PG_SECONDS") or 25)
SEED = int(os.environ.get("WEFT_CHAOS_SEED") or random.randrange(1 << 31))

pytestmark = [
    pytest.mark.skipif(not postgres_available(), reason="PostgreSQL (initdb, pg_ctl) is not installed"),
    pytest.mark.xdist_group("chaos"),  # never beside the other chaos run (pytest -n)
]


@pytest.mark.timeout(SECONDS + 90)
def test_nothing_is_lost_or_committed_twice_when_the_database_drops_restarts_and_is_cut_off(tmp_path, request):
    summary = ChaosRun(tmp_path / "data", SEED, SECONDS, postgres=True).run()
    request.node.user_properties.append(("chaos", "postgres " + summary.line()))  # the summary section (conftest), across xdist workers too
    report = summary.line() + f"\nerrors: {dict(summary.errors)}\n" + "\n".join(summary.violations[:40]) + f"\nreplay: WEFT_CHAOS_SEED={SEED}"
    assert not summary.violations, report
    assert summary.innocents_quarantined == 0 and summary.quarantine_samples >= 5, report
    assert summary.workflows >= 100 and summary.signals >= 20, report
    # Each database fault happened at least once, and the service never went down.
    for kind in PG_KINDS:
        assert summary.errors[f"fault:{kind}"] >= 1, f"no {kind}: {report}"
    assert summary.checker_runs == 2, report
    assert summary.supervisor_exits == 0, report
