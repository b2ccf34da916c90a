"""Run the deterministic simulation over a range of seeds.

    python tests/sim/run.py --seeds 100000 --start S     # long run
    python tests/sim/run.py --seed N [--trace]           # replay one seed exactly

A failing seed prints the one-line command that replays it. String hashing is part of what a
seed fixes (set iteration order in the engine), so this script runs itself with
``PYTHONHASHSEED=0``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _reexec_with_fixed_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def replay_command(seed: int, excluded: frozenset[str] = frozenset()) -> str:
    tail = f" --without {','.join(sorted(excluded))}" if excluded else ""
    return f"python tests/sim/run.py --seed {seed}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds (default 200)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--trace", action="store_true", help="print the trace of each seed run")
    parser.add_argument("--without", default="", help="comma-separated features to leave out")
    parser.add_argument("--ci", action="store_true", help="leave out what the CI budget leaves out")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at the first failing seed")
    args = parser.parse_args(argv)
    sys.path[:0] = [HERE, os.path.dirname(HERE)]
    from _scheduler import ALL_FEATURES, CI_EXCLUDED, run_seed

    excluded = frozenset(name for name in args.without.split(",") if name) | (CI_EXCLUDED if args.ci else frozenset())
    unknown = excluded - ALL_FEATURES
    if unknown:
        parser.error(f"unknown features {sorted(unknown)}; known: {sorted(ALL_FEATURES)}")
    features = ALL_FEATURES - excluded
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    started = time.perf_counter()
    failed = 0
    steps = 0
    for count, seed in enumerate(seeds, 1):
        outcome = run_seed(seed, features)
        steps += outcome.steps
        if args.trace:
            sys.stdout.write("\n".join(outcome.trace) + "\n")
        if outcome.violations:
            failed += 1
            sys.stdout.write(f"seed {seed} FAILED ({len(outcome.violations)} violations): {outcome.violations[0]}\n")
            for violation in outcome.violations[1:5]:
                sys.stdout.write(f"    {violation}\n")
            sys.stdout.write(f"    replay: {replay_command(seed, excluded)}\n")
            if not args.keep_going:
                break
        elif args.seed is not None:
            sys.stdout.write(f"seed {seed} ok: {outcome.steps} steps, {outcome.sim_seconds:.1f} simulated s, trace {outcome.digest[:16]}\n")
        if count % 1000 == 0:
            elapsed = time.perf_counter() - started
            sys.stdout.write(f"{count} seeds, {failed} failed, {elapsed:.0f} s ({count / elapsed:.1f} seeds/s)\n")
            sys.stdout.flush()
    elapsed = time.perf_counter() - started
    sys.stdout.write(f"done: {count} seeds from {seeds[0]}, {failed} failed, {steps} steps, {elapsed:.1f} s ({count / elapsed:.1f} seeds/s)\n")
    return 1 if failed else 0


if __name__ == "__main__":
    _reexec_with_fixed_hash_seed()
    sys.exit(main())
