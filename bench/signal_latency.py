"""Signal latency: from sending a signal to the next committed op of the workflow waiting for
it, with the hint bus and with hints disabled (owner-side polling only).

    python bench/signal_latency.py --signals 1000
    python bench/signal_latency.py --routing owner

Runs two supervisors in turn (``bench_app``, free loopback port, temporary data directory,
durable commits), the second with ``--no-hints``. In each, ``--waiters`` ``waiter``
workflows park in ``ctx.wait_signal("go")``; one client thread sends ``--signals`` signals
over them (each round in a shuffled order), one every ``--interval`` seconds, each carrying its send time. Right
after the op that consumes a signal commits, the workflow records ``ctx.now()``; the
latency of a signal is that stamp minus its send time (one clock, one machine).

Routing matters: with ``--routing owner`` (the supervisor's default) the front door sends
a signal to the shard that owns the workflow, which delivers it in-process, so hints are
not involved. With ``--routing round-robin`` (the default here) about half the signals land
on a shard that does not own the workflow: the owner learns of them from a hint, or, with
hints disabled, from its feed poll once per heartbeat. Both distributions are reported in
full (p50, p90, p99, max) and ``cross_shard_share`` estimates the share that took the slow
path (above ``--slow-ms``). ``stuck_workflows_*`` counts waiters that had not consumed all
their signals 30 s after the last was sent (0 expected), and ``other_cpu_s_*`` the CPU the
rest of the machine used while the signals were sent (a disturbed run shows there).

Prints one JSON line on stdout (and a readable table plus progress bars on stderr).
"""

from __future__ import annotations

import argparse
import random
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, percentile, report, sigterm_as_exit, system_busy_seconds, wait_quiet  # noqa: E402
from _progress import Progress  # noqa: E402


def measure(hints: bool, args: argparse.Namespace) -> tuple[list[float], int, float]:
    from weft_actors import Client

    per = -(-args.signals // args.waiters)
    options = ["--routing", args.routing, "--heartbeat", str(args.heartbeat), "--ttl", str(args.ttl)]
    if not hints:
        options.append("--no-hints")
    with Supervisor(shards=args.shards, args=tuple(options)) as supervisor:
        with Client(supervisor.endpoint, timeout=30) as client:
            handles = [client.start("waiter", per, id=f"waiter-{k}") for k in range(args.waiters)]
            time.sleep(0.5)  # every waiter reaches wait_signal
            wait_quiet(30)
            cpu_before, client_before, busy_before = supervisor.cpu(), time.process_time(), system_busy_seconds()
            progress = Progress(per * args.waiters, "signals " + ("with hints" if hints else "without hints"))
            next_at = time.perf_counter()
            rng = random.Random(args.seed)
            for i in range(per):
                order = list(handles)
                rng.shuffle(order)  # never in step with the front door's round-robin counter
                for handle in order:
                    next_at += args.interval
                    delay = next_at - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    handle.signal("go", time.time())
                    progress.advance()
            cpu_after, busy = supervisor.cpu(), system_busy_seconds() - busy_before
            ours = time.process_time() - client_before + sum(cpu_after[p] - cpu_before[p] for p in cpu_before)
            other_cpu = max(0.0, busy - ours)
            latencies: list[float] = []
            stuck: list[str] = []
            deadline = time.monotonic() + 30 + 2 * args.heartbeat
            for handle in handles:
                try:
                    stamps = handle.result(timeout=max(0.1, deadline - time.monotonic()))
                except TimeoutError:
                    described = handle.describe()
                    consumed = sum(1 for op in described["history"] if op["kind"] == "signal" and op["outcome"] == "ok")
                    stuck.append(f"{handle.id}: {consumed}/{per} consumed, inbox {len(described['inbox'])}, owner {described['owner']}")
                    continue
                for sent, committed in stamps:
                    latencies.append((committed - sent) * 1000)
            if stuck:
                sys.stderr.write("workflows still waiting after every signal was sent:\n  " + "\n  ".join(stuck) + "\n")
                sys.stderr.write(supervisor.log_tail(20))
    return latencies, len(stuck), other_cpu


def summary(prefix: str, latencies: list[float], slow_ms: float) -> dict[str, Any]:
    if not latencies:
        return {f"{prefix}p50_ms": None}
    return {
        f"{prefix}p50_ms": round(percentile(latencies, 0.50), 2),
        f"{prefix}p90_ms": round(percentile(latencies, 0.90), 2),
        f"{prefix}p99_ms": round(percentile(latencies, 0.99), 2),
        f"{prefix}max_ms": round(max(latencies), 2),
        f"{prefix}cross_shard_share": round(sum(1 for v in latencies if v > slow_ms) / len(latencies), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=1000)
    parser.add_argument("--waiters", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between signals")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--routing", choices=("owner", "round-robin"), default="round-robin")
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slow-ms", type=float, default=None, help="threshold of the slow path (default 3 ms with hints, 20 ms without)")
    args = parser.parse_args()
    if args.signals < 1 or args.waiters < 1:
        parser.error("--signals and --waiters must be positive")
    with sigterm_as_exit():
        with_hints, stuck_hints, other_hints = measure(True, args)
        without, stuck_without, other_without = measure(False, args)
    result: dict[str, Any] = {
        "signals": len(with_hints),
        "waiters": args.waiters,
        "shards": args.shards,
        "routing": args.routing,
        "heartbeat": args.heartbeat,
        **summary("hints_", with_hints, args.slow_ms or 3.0),
        **summary("no_hints_", without, args.slow_ms or 20.0),
        "no_hints_bound_ms": round(args.heartbeat * 1000 + 50, 1),
        "stuck_workflows_hints": stuck_hints,
        "stuck_workflows_no_hints": stuck_without,
        "other_cpu_s_hints": round(other_hints, 2),
        "other_cpu_s_no_hints": round(other_without, 2),
    }
    report(result, f"signal latency ({args.routing} routing)")


if __name__ == "__main__":
    main()
