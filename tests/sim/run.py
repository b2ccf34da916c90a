"""Run the deterministic simulation over a range of seeds.

    python tests/sim/run.py --seeds 100000 --start S     # long run (--jobs N: N processes)
    python tests/sim/run.py --seed N [--trace]           # replay one seed exactly

A failing seed prints the one-line command that replays it. String hashing is part of what a
seed fixes (set iteration order in the engine), so this script runs itself with
``PYTHONHASHSEED=0``.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _reexec_with_fixed_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def replay_command(seed: int, excluded: frozenset[str] = frozenset()) -> str:
    tail = f" --without {','.join(sorted(excluded))}" if excluded else ""
    return f"python tests/sim/run.py --seed {seed}{tail}"


def _run(seed: int, features: frozenset[str], trace: bool) -> tuple[Any, ...]:
    """One seed, as what the report needs (a worker process sends back no whole trace)."""
    from _scheduler import run_seed

    outcome = run_seed(seed, features)
    return seed, outcome.violations, outcome.steps, outcome.sim_seconds, outcome.digest, outcome.trace if trace else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds (default 200)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--trace", action="store_true", help="print the trace of each seed run")
    parser.add_argument("--without", default="", help="comma-separated features to leave out")
    parser.add_argument("--ci", action="store_true", help="leave out what the CI budget leaves out")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at the first failing seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (seeds are independent; the report stays in seed order)")
    args = parser.parse_args(argv)
    sys.path[:0] = [HERE, os.path.dirname(HERE)]
    from _scheduler import ALL_FEATURES, CI_EXCLUDED

    excluded = frozenset(name for name in args.without.split(",") if name) | (CI_EXCLUDED if args.ci else frozenset())
    unknown = excluded - ALL_FEATURES
    if unknown:
        parser.error(f"unknown features {sorted(unknown)}; known: {sorted(ALL_FEATURES)}")
    features = ALL_FEATURES - excluded
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    started = time.perf_counter()
    failed = 0
    steps = 0
    run = functools.partial(_run, features=features, trace=args.trace)
    pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 else None
    results = map(run, seeds) if pool is None else pool.imap(run, seeds, chunksize=8)
    try:
        for count, (seed, violations, seed_steps, sim_seconds, digest, trace) in enumerate(results, 1):
            steps += seed_steps
            if trace is not None:
                sys.stdout.write("\n".join(trace) + "\n")
            if violations:
                failed += 1
                sys.stdout.write(f"seed {seed} FAILED ({len(violations)} violations): {violations[0]}\n")
                for violation in violations[1:5]:
                    sys.stdout.write(f"    {violation}\n")
                sys.stdout.write(f"    replay: {replay_command(seed, excluded)}\n")
                if not args.keep_going:
                    break
            elif args.seed is not None:
                sys.stdout.write(f"seed {seed} ok: {seed_steps} steps, {sim_seconds:.1f} simulated s, trace {digest[:16]}\n")
            if count % 1000 == 0:
                elapsed = time.perf_counter() - started
                sys.stdout.write(f"{count} seeds, {failed} failed, {elapsed:.0f} s ({count / elapsed:.1f} seeds/s)\n")
                sys.stdout.flush()
    finally:
        if pool is not None:
            pool.terminate()
    elapsed = time.perf_counter() - started
    sys.stdout.write(f"done: {count} seeds from {seeds[0]}, {failed} failed, {steps} steps, {elapsed:.1f} s ({count / elapsed:.1f} seeds/s)\n")
    return 1 if failed else 0


if __name__ == "__main__":
    _reexec_with_fixed_hash_seed()
    sys.exit(main())
