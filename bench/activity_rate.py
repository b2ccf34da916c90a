"""Activity rate limit across shards: how close the starts of a ``rate_limit="50/s"`` activity
come to 50 a second when several shards share it.

    python bench/activity_rate.py
    python bench/activity_rate.py --workflows 800 --shards 4

Starts a supervisor (``bench_app``, free loopback port, temporary data directory, durable
commits) with ``--shards`` shards, then starts ``--workflows`` ``rate_limited`` workflows at
once through ``AsyncClient`` (no fixed ids: they spread over the shards) and collects their
results: each is the wall time its one activity attempt started (one clock, one machine).
The permits are taken in the shards' group commits (``store/_permits``), so the rate holds
for all shards together.

Prints one JSON line: ``rate_limit``, ``shards``, ``workflows``; ``max_in_4s`` and
``min_in_4s``, the most and fewest starts in any 4 s window that begins a second or more
after the first start and ends by the last; ``observed_per_s``, the starts in the central
4 s window over 4; ``within_10pct``, whether that is within 10 % of the limit;
``starts_by_shard``, how many attempts each shard ran (the limit was shared). No assertions.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, report, sigterm_as_exit, supervisor_bench_args  # noqa: E402
from _progress import Progress  # noqa: E402

RATE = 50.0  # bench_app.rate_limited_stamp's rate_limit="50/s"
WINDOW = 4.0


async def drive(endpoint: str, workflows: int, progress: Progress) -> list[list[float]]:
    from weft_actors import AsyncClient

    async with AsyncClient(endpoint, timeout=120) as client:
        handles = await asyncio.gather(*(client.start("rate_limited") for _ in range(workflows)))

        async def result(handle: Any) -> list[float]:
            value = await handle.result(timeout=max(120.0, 4 * workflows / RATE))
            progress.advance()
            return [float(value[0]), value[1]]

        return list(await asyncio.gather(*(result(handle) for handle in handles)))


def windows(starts: list[float]) -> tuple[int | None, int | None, float | None]:
    """(most, fewest) starts in a ``WINDOW`` s window inside [first + 1 s, last], sliding by
    1 ms, and the starts per second of the central window."""
    first, last = starts[0], starts[-1]
    begin, end = first + 1.0, last - WINDOW
    if end < begin:
        return None, None, None
    counts = []
    at = begin
    while at <= end:
        counts.append(bisect.bisect_left(starts, at + WINDOW) - bisect.bisect_left(starts, at))
        at += 0.001
    middle = (first + last) / 2 - WINDOW / 2
    central = bisect.bisect_left(starts, middle + WINDOW) - bisect.bisect_left(starts, middle)
    return max(counts), min(counts), central / WINDOW


def main() -> None:
    args = supervisor_bench_args(__doc__, 400)
    with sigterm_as_exit(), Supervisor(shards=args.shards) as supervisor:
        progress = Progress(args.workflows, "rate-limited workflows")
        stamps = asyncio.run(drive(supervisor.endpoint, args.workflows, progress))
    starts = sorted(at for at, _ in stamps)
    by_shard: dict[Any, int] = {}
    for _, pid in stamps:
        by_shard[pid] = by_shard.get(pid, 0) + 1
    most, fewest, observed = windows(starts)
    result = {
        "rate_limit": "50/s",
        "shards": args.shards,
        "workflows": args.workflows,
        "seconds": round(starts[-1] - starts[0], 3),
        "max_in_4s": most,
        "min_in_4s": fewest,
        "observed_per_s": None if observed is None else round(observed, 2),
        "within_10pct": observed is not None and abs(observed - RATE) <= 0.1 * RATE,
        "starts_by_shard": sorted(by_shard.values(), reverse=True),
    }
    report(result, "activity rate limit across shards")


if __name__ == "__main__":
    main()
