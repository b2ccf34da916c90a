"""The peer: the same three-step workflow on DBOS Transact (Python) with its SQLite system
database (or a PostgreSQL one), N workflows, durable commits.

    pip install 'weft_actors[peers]'          # dbos==3.4.0
    python bench/peers/dbos_throughput.py --workflows 2000
    python bench/peers/dbos_throughput.py --workflows 2000 --system-database postgresql://...

DBOS runs in this process (it is a library: workflows and steps execute in the caller's
process, checkpointed to the system database). The system database is a fresh SQLite file
in a temporary directory (``system_database_url: sqlite:///...``), left with DBOS's own
settings: rollback journal, sqlite3's default ``synchronous=FULL`` (an fsync per commit) and
IMMEDIATE write transactions. Every workflow is started with ``DBOS.start_workflow`` and
awaited with ``handle.get_result()``; ``--concurrency`` workers (threads) keep that many in
flight, so a latency is again the start request to the result. The workflow is three
``@DBOS.step`` calls of ``x + 1``, like ``bench_app.three_steps``.

Prints one JSON line on stdout: workflows, steps, seconds, workflows_per_s, steps_per_s,
p50_ms, p99_ms, cpu_s (this process), concurrency, peer, version (a readable table and a
progress bar go to stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from _harness import percentile, sigterm_as_exit, table  # noqa: E402
from _progress import Progress  # noqa: E402


def run(workflows: int, concurrency: int, warmup: int, deadline: float = 1800.0, system_database: str | None = None) -> dict[str, Any]:
    try:
        import dbos
        from dbos import DBOS, DBOSConfig
    except ImportError:
        raise SystemExit("DBOS is not installed: pip install 'dbos==3.4.0' (the 'peers' extra)")

    data_dir = tempfile.mkdtemp(prefix="weft-dbos-")
    try:
        config: DBOSConfig = {
            "name": "weft-bench-peer",
            "system_database_url": system_database or f"sqlite:///{os.path.join(data_dir, 'dbos.sqlite')}",
            "run_admin_server": False,
            "log_level": "WARNING",
            "max_executor_threads": max(64, concurrency + 8),
        }
        DBOS(config=config)

        @DBOS.step()
        def add_one(x: int) -> int:
            return x + 1

        @DBOS.workflow()
        def three_steps(x: int) -> int:
            a = add_one(x)
            b = add_one(a)
            return add_one(b)

        DBOS.launch()
        logging.getLogger("dbos").setLevel(logging.WARNING)
        try:

            def drive(first: int, count: int, progress: Progress | None) -> list[float]:
                latencies: list[float] = []
                lock = threading.Lock()
                cursor = [first]
                errors: list[BaseException] = []

                def worker() -> None:
                    try:
                        while True:
                            with lock:
                                i = cursor[0]
                                if i >= first + count:
                                    return
                                cursor[0] += 1
                            started = time.perf_counter()
                            result = DBOS.start_workflow(three_steps, i).get_result()
                            elapsed = time.perf_counter() - started
                            if result != i + 3:
                                raise AssertionError(f"{result!r} != {i + 3}")
                            with lock:
                                latencies.append(elapsed)
                                if progress is not None:
                                    progress.advance()
                    except BaseException as exc:
                        errors.append(exc)

                threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(concurrency, count)))]
                for thread in threads:
                    thread.start()
                give_up = time.monotonic() + deadline
                for thread in threads:
                    thread.join(max(0.0, give_up - time.monotonic()))
                    if thread.is_alive():
                        raise TimeoutError(f"DBOS workflows did not finish within {deadline}s")
                if errors:
                    raise errors[0]
                return latencies

            if warmup:
                drive(10_000_000, warmup, None)
            progress = Progress(workflows, "DBOS workflows")
            cpu0 = time.process_time()
            started = time.perf_counter()
            latencies = drive(0, workflows, progress)
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu0
        finally:
            DBOS.destroy(destroy_registry=True)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "peer": "dbos-postgresql" if system_database else "dbos-sqlite",
        "version": getattr(dbos, "__version__", None) or _version("dbos"),
        "workflows": workflows,
        "steps": 3,
        "seconds": round(seconds, 3),
        "workflows_per_s": round(workflows / seconds, 1),
        "steps_per_s": round(workflows * 3 / seconds, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "cpu_s": round(cpu, 3),
        "concurrency": concurrency,
    }


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1, help="workflows in flight (threads; 1 is DBOS-SQLite's fastest here)")
    parser.add_argument("--warmup", type=int, default=None, help="uncounted workflows first (default: min(100, N/10))")
    parser.add_argument("--deadline", type=float, default=1800.0, help="give up after this many seconds")
    parser.add_argument("--system-database", metavar="URL", help="a PostgreSQL URL for DBOS's system database (default: a fresh SQLite file)")
    args = parser.parse_args()
    warmup = min(100, args.workflows // 10) if args.warmup is None else args.warmup
    with sigterm_as_exit():
        result = run(args.workflows, args.concurrency, warmup, args.deadline, args.system_database)
    table(result, "DBOS (PostgreSQL system database)" if args.system_database else "DBOS (SQLite system database)")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
