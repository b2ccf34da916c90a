"""The chaos harness's command line: many or long runs, with the faults that need root
(``--store-faults``, ``--clock-faults``) or a PostgreSQL installation (``--postgres``).
``python tests/chaos/chaos_harness.py --help`` runs it."""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from chaos_harness import ChaosRun  # noqa: E402
from chaos_postgres import postgres_available  # noqa: E402
from chaos_summary import Summary  # noqa: E402

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Chaos under continuous load through the real supervisor.")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of load and faults per run")
    parser.add_argument("--seed", type=int, default=None, help="seed of the first run (default: random)")
    parser.add_argument("--runs", type=int, default=1, help="runs, with seeds seed, seed+1, ...")
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="keep each run's data directory")
    parser.add_argument("--store-faults", action="store_true", help="add disk-full and read-only faults (root)")
    parser.add_argument("--clock-faults", action="store_true", help="add wall-clock jumps of the whole machine (root; the clock is stepped back after each)")
    parser.add_argument(
        "--postgres", action="store_true",
        help="store on a fresh PostgreSQL server per run, behind a pausable proxy, with its faults: backends terminated, server restarts, network cuts",
    )
    args = parser.parse_args(argv)
    if args.postgres and args.store_faults:
        parser.error("--store-faults are LMDB's (a full or read-only data directory); --postgres brings its own")
    if args.postgres and not postgres_available():
        parser.error("--postgres needs initdb and pg_ctl (pg_config --bindir, or /usr/lib/postgresql/*/bin)")
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    total = Summary(seed=seed, seconds=args.seconds, runs=0)
    for run_index in range(args.runs):
        data = Path(tempfile.mkdtemp(prefix=f"weft-chaos-{seed + run_index}-")) / "data"
        run = ChaosRun(
            data, seed + run_index, args.seconds, shards=args.shards, workers=args.workers,
            store_faults=args.store_faults, clock_faults=args.clock_faults, postgres=args.postgres,
        )
        summary = run.run()
        total.merge(summary)
        for violation in summary.violations:
            print(f"  {violation}")
        print(f"  errors retried: {dict(summary.errors)}")
        if not args.keep and not summary.violations:
            shutil.rmtree(data.parent, ignore_errors=True)
        elif summary.violations:
            print(f"  data kept in {data}")
    print("TOTAL " + total.line())
    return 1 if total.violations else 0


if __name__ == "__main__":
    sys.exit(main())
