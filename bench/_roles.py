"""``throughput.py``'s figures per role: CPU per workflow of the front door, each shard and
the client(s), next to the same workflows on one in-process ``Engine`` measured in the same
run (``engine_throughput.py`` in a child process, same N and steps), and the two ratios issue
31's goal names.

The in-process run is a child, not a call in this process, so its CPU is that process's own
and nothing of this bench's client (or its imports) is counted in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def in_process(workflows: int, steps: int, store: str | None = None, timeout: float = 900.0) -> dict[str, Any]:
    """``engine_throughput.py``'s JSON line for ``workflows`` workflows of ``steps`` steps
    (its own default: all started at once, ``execute``), its progress bar on our stderr."""
    command = [sys.executable, os.path.join(HERE, "engine_throughput.py"), "--workflows", str(workflows), "--steps", str(steps)]
    if store:
        command += ["--store", store]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=timeout, check=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"engine_throughput.py printed no JSON line: {done.stdout!r}")
    return json.loads(lines[-1])


def per_role(result: dict[str, Any], inside: dict[str, Any] | None) -> dict[str, Any]:
    """The keys ``throughput.py`` adds to its line from ``cpu_by_process`` (the supervisor
    first, then the shards), ``client_cpu_s`` and the in-process line ``inside``:
    ``cpu_us_per_workflow_by_role`` (``front_door``, ``shards`` (one each), ``server`` (the two
    together), ``client``), ``in_process`` (its ``workflows_per_s`` and ``cpu_us_per_workflow``)
    and ``vs_in_process``: ``server_cpu`` (server CPU per workflow over the in-process one: the
    goal is at most 1.25) and ``workflows_per_s`` (this run's over the in-process one: the goal
    is at least 1.3 with 2 shards)."""
    workflows = result["workflows"]
    cpu = list(result["cpu_by_process"].values())

    def us(seconds: float) -> float:
        return round(seconds / workflows * 1e6, 1)

    server = us(sum(cpu))
    added: dict[str, Any] = {
        "cpu_us_per_workflow_by_role": {
            "front_door": us(cpu[0]) if cpu else None,
            "shards": [us(seconds) for seconds in cpu[1:]],
            "server": server,
            "client": us(result["client_cpu_s"]),
        }
    }
    if inside is not None:
        added["in_process"] = {"workflows_per_s": inside["workflows_per_s"], "cpu_us_per_workflow": inside["cpu_us_per_workflow"], "seconds": inside["seconds"]}
        added["vs_in_process"] = {
            "server_cpu": round(server / inside["cpu_us_per_workflow"], 2),
            "workflows_per_s": round(result["workflows_per_s"] / inside["workflows_per_s"], 2),
        }
    return added
