"""Overload: open-loop starts at multiples of the measured capacity, through a real supervisor.

    python bench/overload.py --shards 2                       # 1x, 2x, 4x for 10 s each
    python bench/overload.py --duration 30 --multipliers 1,2,4 --clients 2

Starts ``python -m weft_actors.supervisor --app bench_app`` (durable commits), measures its
capacity first (``--measure`` seconds of ``three_steps`` workflows through ``execute`` with
``--concurrency`` in flight: workflows per second), then for each multiplier M sends starts
of ``three_steps`` at M x capacity per second for ``--duration`` seconds without waiting for
replies (open loop: a start is sent on schedule whether or not the last ones were answered).
A start is accepted (its reply names the workflow) or refused with ``Overloaded``; after the
load stops the bench waits for the result of every accepted workflow. ``--clients N`` splits
the offered rate over N client processes (one asyncio client cannot offer much more than
~10k requests/s, and its own loop lag would count as the server's latency).

Prints one JSON line per multiplier: multiplier, offered_per_s (what the client managed to
send), accepted_per_s, refused_per_s, other_errors, p50_ms/p99_ms (latency of accepted
starts: request to reply, in the client, whose own loop lag is in it), server_p50_ms/
server_p99_ms (the same inside the service: arrival at the front door to the reply leaving
it, sampled one start in 16 over the phase's last ~30,000 accepted starts), drain_s (end of the load to the last accepted
workflow's result), completed (must equal accepted), shards_removed (restarts and hung kills
of the supervisor during the phase: must be 0), and the capacity measured.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, percentile, report, sigterm_as_exit  # noqa: E402


async def capacity(endpoint: str, seconds: float, concurrency: int) -> float:
    """Workflows per second, closed loop: ``concurrency`` workers each ``execute`` again and again."""
    from weft_actors import AsyncClient
    from weft_actors.errors import Overloaded

    done = 0
    async with AsyncClient(endpoint, timeout=120) as client:
        stop = time.monotonic() + seconds

        async def worker(w: int) -> None:
            nonlocal done
            i = w
            while time.monotonic() < stop:
                try:
                    await client.execute("three_steps", i, timeout=120)
                except Overloaded:
                    await asyncio.sleep(0.01)  # as a client must: back off, then try again
                    continue
                done += 1
                i += concurrency

        started = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return done / (time.monotonic() - started)


RESULT_WINDOW = 5000


async def phase(endpoint: str, rate: float, seconds: float, base: int) -> dict[str, Any]:
    """Send ``rate`` starts a second for ``seconds``; then wait for every accepted one's end.
    The raw counts and latencies of one client (``combine`` sums the clients)."""
    from weft_actors import AsyncClient
    from weft_actors.errors import Overloaded

    latencies: list[float] = []
    accepted: list[tuple[str, int]] = []
    refused = 0
    other: dict[str, int] = {}
    async with AsyncClient(endpoint, timeout=60) as client:

        async def one(i: int) -> None:
            nonlocal refused
            started = time.perf_counter()
            try:
                handle = await client.start("three_steps", i, id=f"o{i}")
            except Overloaded:
                refused += 1
                return
            except Exception as exc:  # reported, not fatal: the JSON says how many
                other[type(exc).__name__] = other.get(type(exc).__name__, 0) + 1
                return
            latencies.append(time.perf_counter() - started)
            accepted.append((handle.id, i))

        tasks: list[asyncio.Task[None]] = []
        begin = time.monotonic()
        sent = 0
        while (now := time.monotonic()) < begin + seconds:
            due = int((now - begin) * rate)
            while sent < due:
                tasks.append(asyncio.ensure_future(one(base + sent)))
                sent += 1
            await asyncio.sleep(0.002)
        sending = time.monotonic() - begin
        await asyncio.gather(*tasks)
        load_end = time.monotonic()
        # At most RESULT_WINDOW results asked at once: a client that batches its requests would
        # otherwise hold more waits on a shard than its ``max_queued_requests`` (20,000) and be
        # refused ``Overloaded`` for the rest, which is the bound at work, not the load measured.
        window = asyncio.Semaphore(RESULT_WINDOW)

        async def result_of(wid: str) -> Any:
            async with window:
                return await client.get_handle(wid).result(timeout=300)

        results = await asyncio.gather(*(result_of(wid) for wid, _ in accepted), return_exceptions=True)
        drain = time.monotonic() - load_end
    completed = sum(1 for (wid, i), result in zip(accepted, results) if result == i + 3)
    return {"sent": sent, "sending": sending, "latencies": latencies, "accepted": len(accepted), "refused": refused, "other": other, "completed": completed, "drain": drain}


def _client_process(endpoint: str, rate: float, seconds: float, base: int, out: Any) -> None:
    out.put(asyncio.run(phase(endpoint, rate, seconds, base)))


def run_phase(endpoint: str, rate: float, seconds: float, base: int, clients: int) -> dict[str, Any]:
    """One phase offered by ``clients`` processes at ``rate / clients`` each (1: in this process)."""
    if clients == 1:
        return combine([asyncio.run(phase(endpoint, rate, seconds, base))])
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [context.Process(target=_client_process, args=(endpoint, rate / clients, seconds, base + k * 1_000_000, out)) for k in range(clients)]
    for process in processes:
        process.start()
    try:
        parts = [out.get(timeout=seconds + 600) for _ in processes]
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
    return combine(parts)


def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    sending = max(part["sending"] for part in parts)
    latencies = [value for part in parts for value in part["latencies"]]
    other: dict[str, int] = {}
    for part in parts:
        for name, n in part["other"].items():
            other[name] = other.get(name, 0) + n
    accepted = sum(part["accepted"] for part in parts)
    return {
        "offered_per_s": round(sum(part["sent"] for part in parts) / sending, 1),
        "accepted_per_s": round(accepted / sending, 1),
        "refused_per_s": round(sum(part["refused"] for part in parts) / sending, 1),
        "other_errors": other,
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "accepted": accepted,
        "completed": sum(part["completed"] for part in parts),
        "drain_s": round(max(part["drain"] for part in parts), 2),
    }


def supervisor_stats(endpoint: str) -> dict[str, Any]:
    from weft_actors import Client

    with Client(endpoint, timeout=30) as client:
        stats: dict[str, Any] = client.stats()["supervisor"]
    return stats


def removed(stats: dict[str, Any]) -> int:
    return int(stats["restarts"]) + int(stats["hung_kills"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per multiplier (default 10)")
    parser.add_argument("--measure", type=float, default=5.0, help="seconds of the closed-loop capacity measurement (default 5)")
    parser.add_argument("--concurrency", type=int, default=500, help="workflows in flight while measuring capacity")
    parser.add_argument("--multipliers", default="1,2,4", help="comma-separated multiples of capacity (default 1,2,4)")
    parser.add_argument("--clients", type=int, default=2, help="client processes offering the load (default 2)")
    parser.add_argument("--supervisor-arg", action="append", default=[], help="extra supervisor option (repeatable)")
    args = parser.parse_args()
    with sigterm_as_exit(), Supervisor(shards=args.shards, args=tuple(args.supervisor_arg)) as supervisor:
        measured = asyncio.run(capacity(supervisor.endpoint, args.measure, args.concurrency))
        base = 1_000_000
        for multiplier in (float(m) for m in args.multipliers.split(",")):
            before = removed(supervisor_stats(supervisor.endpoint))
            result = run_phase(supervisor.endpoint, multiplier * measured, args.duration, base, args.clients)
            after = supervisor_stats(supervisor.endpoint)
            base += 100_000_000
            result = {
                "bench": "overload",
                "shards": args.shards,
                "multiplier": multiplier,
                "capacity_per_s": round(measured, 1),
                "duration_s": args.duration,
                "clients": args.clients,
                **result,
                "server_p50_ms": after.get("frontdoor_start_latency_p50_ms"),
                "server_p99_ms": after.get("frontdoor_start_latency_p99_ms"),
                "shards_removed": removed(after) - before,
            }
            report(result, f"overload, {multiplier:g}x capacity")
            if result["shards_removed"]:  # why: the supervisor's log says
                sys.stderr.write("".join(supervisor.stderr_lines[-150:]))


if __name__ == "__main__":
    main()
