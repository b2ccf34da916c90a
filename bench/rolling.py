"""A rolling restart and a live resize under a steady open-loop load of starts.

    python bench/rolling.py --rate 2000 --shards 4          # the issue's run
    python bench/rolling.py --rate 200 --shards 4 --before 3  # a small machine
    python bench/rolling.py --postgres --supervisors 2 --rate 200 --shards 2  # two hosts
    python bench/rolling.py --rate 200 --shards 4 --before 3 --direct  # starts straight to the shards

Starts ``two_halves`` workflows (two 0.5 s activities, ``bench_app``) at ``--rate`` per second
from an ``AsyncClient``, on a schedule that does not wait for answers (a start's latency runs
from when it was due: a slow answer is not hidden by a late send). After ``--before``
seconds it runs ``shards restart``, then ``shards set 2`` (from ``--shards``) and ``shards set
N`` back, each followed to its end; then the load stops and every acknowledged workflow is
awaited. One JSON line: failed requests (bar: 0), p50/p99 start latency before the roll and
during it, activity attempts run more than once (``$WEFT_BENCH_LOG``; bar: 0 within the
grace), lost workflows (acknowledged, never completed) and duplicated ones (in the store,
never acknowledged: a start that failed yet landed), the roll's and the resizes' durations.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import threading
import time
from typing import Any

from _harness import Supervisor, percentile, report, scratch_dir, settled_and_present
from weft_actors import AsyncClient, Client


def _change(endpoint: str, action: str, count: int | None = None) -> dict[str, Any]:
    """One ``shards`` change, followed to its end (as the CLI does)."""
    with Client(endpoint, timeout=30) as client:
        number = client.shards(action, count)["roll"]
        while True:
            last = client.shards("list")["roll"].get("last")
            if last is not None and last.get("roll") == number:
                return dict(last)
            time.sleep(0.2)


async def _load(endpoint: str | list[str], rate: float, stop: threading.Event, out: dict[str, Any], prefix: str = "roll", direct: bool = False, **start: Any) -> None:
    acked: list[str] = []
    failures: list[str] = []
    latencies: list[tuple[float, float]] = []  # (due, latency)
    async with AsyncClient(endpoint, timeout=30, direct=direct) as client:
        pending: set[asyncio.Task[None]] = set()

        async def one(n: int, due: float) -> None:
            try:
                await client.start("two_halves", id=f"{prefix}-{n}", **start)
                acked.append(f"{prefix}-{n}")
            except Exception as exc:  # noqa: BLE001 - every failure is counted and named
                failures.append(f"{type(exc).__name__}: {exc}")
            latencies.append((due, time.monotonic() - due))

        began = time.monotonic()
        n = 0
        while not stop.is_set():
            due = began + n / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(n, due))
            pending.add(task)
            task.add_done_callback(pending.discard)
            n += 1
        await asyncio.gather(*pending)
    out.update(acked=acked, failures=failures, latencies=latencies, sent=n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="starts per second (default 2000)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shrink-to", type=int, default=2)
    parser.add_argument("--before", type=float, default=5.0, help="seconds of load before the roll")
    parser.add_argument("--direct", action="store_true", help="the load's client sends its starts straight to the shards (AsyncClient(direct=True))")
    parser.add_argument("--postgres", action="store_true", help="two supervisors on a fresh PostgreSQL server: one SIGTERMed and started again (``_rolling_pg``)")
    parser.add_argument("--parked", type=int, default=200, help="with --postgres: workflows parked in a timer through the leave and the rejoin")
    parser.add_argument("--supervisors", type=int, default=2, choices=(2,), help="with --postgres: supervisors (2)")
    args = parser.parse_args()
    if args.postgres:
        from _rolling_pg import run_two

        return run_two(args, _load)
    if args.rate <= 0 or args.shards < 2 or not 1 <= args.shrink_to <= args.shards:
        parser.error("--rate > 0, --shards >= 2 and 1 <= --shrink-to <= --shards")
    with scratch_dir(prefix="weft-rolling-log-") as log_dir, Supervisor(shards=args.shards, env={"WEFT_BENCH_LOG": log_dir}) as sup:
        stop = threading.Event()
        loaded: dict[str, Any] = {}
        loader = threading.Thread(target=lambda: asyncio.run(_load(sup.endpoint, args.rate, stop, loaded, direct=args.direct)), daemon=True)
        loader.start()
        time.sleep(args.before)
        roll_began = time.monotonic()
        steps = {}
        for name, action, count in (("restart", "restart", None), (f"set_{args.shrink_to}", "set", args.shrink_to), (f"set_{args.shards}", "set", args.shards)):
            began = time.monotonic()
            last = _change(sup.endpoint, action, count)
            steps[name] = {"outcome": last["outcome"], "duration_s": round(time.monotonic() - began, 3)}
            sys.stderr.write(f"{name}: {last['outcome']} in {steps[name]['duration_s']}s: {last['message']}\n")
        roll_ended = time.monotonic()
        time.sleep(1.0)
        stop.set()
        loader.join(120)
        acked = loaded.get("acked", [])
        with Client(sup.endpoint, timeout=30) as client:
            sup.note_pids(client.stats())
            lost, present = settled_and_present(client, acked, ("two_halves",))
        runs: collections.Counter[str] = collections.Counter()
        for name in os.listdir(log_dir):
            with open(os.path.join(log_dir, name)) as f:
                runs.update(line.split("\t")[1] for line in f if line.startswith("R\t"))
        latencies = loaded.get("latencies", [])
        before = [lat for due, lat in latencies if due < roll_began]
        during = [lat for due, lat in latencies if roll_began <= due <= roll_ended]
        result = {
            "bench": "rolling",
            "rate": args.rate,
            "shards": args.shards,
            "direct": args.direct,
            "sent": loaded.get("sent", 0),
            "acknowledged": len(acked),
            "failed_requests": len(loaded.get("failures", [])),
            "failures_first": loaded.get("failures", [])[:3],
            "start_p50_before_ms": round(percentile(before, 0.5) * 1000, 2),
            "start_p99_before_ms": round(percentile(before, 0.99) * 1000, 2),
            "start_p50_during_ms": round(percentile(during, 0.5) * 1000, 2),
            "start_p99_during_ms": round(percentile(during, 0.99) * 1000, 2),
            "start_max_during_ms": round(max(during, default=0.0) * 1000, 2),
            "activity_attempts_run_twice": sum(1 for count in runs.values() if count > 1),
            "activity_attempts": sum(runs.values()),
            "lost_workflows": lost,
            "duplicated_workflows": max(0, present - len(acked)),
            "roll_duration_s": steps["restart"]["duration_s"],
            "steps": steps,
        }
        report(result, "rolling restart and resize under load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
