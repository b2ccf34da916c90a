"""``rolling.py --postgres``: two supervisors on one fresh PostgreSQL server, a steady open-loop
load of starts through both front doors (each client fails over to the other door), and one
supervisor stopped with ``SIGTERM`` (its shards drain to the other host's, ``_leaving``) and
started again (it rejoins and takes its share of the parked workflows back, the other host's
engines handing them over, ``shard._membership``). The same JSON fields as the LMDB mode.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import threading
import time
from typing import Any, Awaitable, Callable

from _harness import percentile, report, scratch_dir, settled_and_present
from weft_actors import Client

BENCH = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(BENCH), "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

Load = Callable[..., Awaitable[None]]
PARKED_FOR = 20.0
"""Seconds past ``--before`` the parked workflows sleep: through the leave and the rejoin."""
TIMING = ("--heartbeat", "0.5", "--ttl", "3", "--log-level", "INFO")


def _owned(endpoint: str) -> int:
    with Client(endpoint, timeout=10) as client:
        return sum(int(shard.get("claims_active") or 0) for shard in client.stats()["shards"])


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not met within {timeout}s")
        time.sleep(0.2)


def run_two(args: argparse.Namespace, load: Load) -> int:
    """The run; each loader's client fails over to the other door, and its starts carry an id
    and ``if_exists="return"`` (a start whose connection was lost is retried there: one that
    landed is answered, not duplicated), as a client of several supervisors should."""
    from _postgres import PostgresServer, find_bindir
    from _processes import RunningSupervisor

    bindir = find_bindir()
    if bindir is None:
        sys.stderr.write("no PostgreSQL server binaries found (pg_config --bindir)\n")
        return 2
    path = os.pathsep.join(p for p in (BENCH, TESTS, os.environ.get("PYTHONPATH", "")) if p)
    with PostgresServer(bindir) as server, scratch_dir(prefix="weft-rolling-log-") as log_dir:
        env = {"WEFT_BENCH_LOG": log_dir, "PYTHONPATH": path}
        hosts = [RunningSupervisor(server.url, shards=args.shards, app="bench_app", args=TIMING, env=env) for _ in range(2)]
        try:
            for host in hosts:
                host.start(timeout=60)
            doors = [host.endpoint for host in hosts]
            wake_at = time.time() + args.before + PARKED_FOR
            held = [f"held-{i}" for i in range(args.parked)]
            for i, wid in enumerate(held):  # parked in a durable timer through the leave and the rejoin
                with Client([doors[i % 2], doors[1 - i % 2]], timeout=30) as client:
                    client.start("held", wake_at, 0.01, id=wid)
            stop = threading.Event()
            loaded: list[dict[str, Any]] = [{}, {}]
            loaders = [
                threading.Thread(target=lambda i=i: asyncio.run(load([doors[i], doors[1 - i]], args.rate / 2, stop, loaded[i], prefix=f"roll{i}", if_exists="return")), daemon=True)
                for i in (0, 1)
            ]
            for loader in loaders:
                loader.start()
            time.sleep(args.before)
            roll_began = time.monotonic()
            code = hosts[0].terminate(120)
            left = time.monotonic()
            sys.stderr.write(f"host A exited {code} after SIGTERM in {left - roll_began:.2f}s\n")
            hosts[0].start(timeout=60)
            rejoined = time.monotonic()
            _wait(lambda: _owned(doors[0]) > 0, 30, "host A owning workflows again")
            took_back = time.monotonic()
            sys.stderr.write(f"host A rejoined in {rejoined - left:.2f}s and owned workflows again {took_back - rejoined:.2f}s later\n")
            roll_ended = time.monotonic()
            time.sleep(1.0)
            stop.set()
            for loader in loaders:
                loader.join(120)
            acked = [wid for part in loaded for wid in part.get("acked", [])]
            starts = len(acked)
            acked += held
            failures = [f for part in loaded for f in part.get("failures", [])]
            latencies = [lat for part in loaded for lat in part.get("latencies", [])]
            with Client([doors[1], doors[0]], timeout=30) as client:
                lost, present = settled_and_present(client, acked, ("two_halves", "held"))
            handed_back = sum(int(n) for n in _handed(hosts[1].log_text()))
        finally:
            for host in hosts:
                host.kill()
        runs: collections.Counter[str] = collections.Counter()
        for name in os.listdir(log_dir):
            with open(os.path.join(log_dir, name)) as f:
                runs.update(line.split("\t")[1] for line in f if line.startswith(("R\t", "S\t")))  # an attempt's start
    before = [lat for due, lat in latencies if due < roll_began]
    during = [lat for due, lat in latencies if roll_began <= due <= roll_ended]
    result = {
        "bench": "rolling",
        "store": "postgres",
        "supervisors": 2,
        "rate": args.rate,
        "shards_each": args.shards,
        "sent": sum(part.get("sent", 0) for part in loaded),
        "acknowledged": starts,
        "parked": args.parked,
        "failed_requests": len(failures),
        "failures_first": failures[:3],
        "start_p50_before_ms": round(percentile(before, 0.5) * 1000, 2),
        "start_p99_before_ms": round(percentile(before, 0.99) * 1000, 2),
        "start_p50_during_ms": round(percentile(during, 0.5) * 1000, 2),
        "start_p99_during_ms": round(percentile(during, 0.99) * 1000, 2),
        "start_max_during_ms": round(max(during, default=0.0) * 1000, 2),
        "activity_attempts_run_twice": sum(1 for count in runs.values() if count > 1),
        "activity_attempts": sum(runs.values()),
        "lost_workflows": lost,
        "duplicated_workflows": max(0, present - len(acked)),
        "sigterm_exit_code": code,
        "leave_duration_s": round(left - roll_began, 3),
        "rejoin_duration_s": round(rejoined - left, 3),
        "share_back_after_s": round(took_back - rejoined, 3),
        "rebalancing_moves_b": handed_back,
        "roll_duration_s": round(roll_ended - roll_began, 3),
    }
    report(result, "SIGTERM and rejoin of one of two supervisors on PostgreSQL under load")
    return 0


def _handed(log_text: str) -> list[str]:
    """The counts of the surviving host's rebalancing lines (parked workflows handed back)."""
    import re

    return re.findall(r"handed (\d+) parked workflows to the engines that now prefer them", log_text)
