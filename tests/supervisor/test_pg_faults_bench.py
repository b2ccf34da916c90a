"""``bench/pg_faults.py`` end to end, one scenario at half its durations: two supervisors on a
fresh PostgreSQL server under a steady load, the server down for 10 s with a shard SIGKILLed
2.5 s into it. The supervisors stay up (the killed shard's restarts, which find no database,
do not spend the restart intensity), no engine is deposed and no shard killed as hung because
of the database, every acknowledged workflow completes exactly once (proven from the
activities' own execution log), nothing is quarantined and the checker is clean.

The bench is run as the operator runs it (its own process, its JSON line read back), so the
script itself is tested too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _postgres import find_bindir

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(find_bindir() is None, reason="PostgreSQL (initdb, pg_ctl) is not installed")


@pytest.mark.timeout(180)
def test_two_supervisors_ride_out_the_database_down_while_a_shard_is_killed():
    ran = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "pg_faults.py"), "--scenario", "down_kill", "--scale", "0.5", "--finish-timeout", "60"],
        capture_output=True, text=True, timeout=170, env={**os.environ},
    )
    lines = [line for line in ran.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"exit {ran.returncode}\n{ran.stdout}\n{ran.stderr[-3000:]}"
    result = json.loads(lines[0])
    report = json.dumps(result, indent=1)
    assert "error" not in result, report
    assert result["fault"]["shard_killed_pid"] is not None, report
    assert result["supervisor_exits"] == 0 and result["restart_intensity_exceeded"] == 0, report
    assert result["engines_deposed"] == 0 and result["shards_killed"] == {}, report
    assert result["acknowledged"] >= 10 and result["completed_once"] == result["acknowledged"], report
    assert result["lost"] == result["duplicated"] == result["quarantined"] == 0, report
    assert result["checker"] == "clean" and result["all_completed_in_time"], report
    assert result["clean"] and ran.returncode == 0, report
