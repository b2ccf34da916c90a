"""weft_actors and DBOS side by side: the same three-step workflow, the same N, one run.

    python bench/compare.py --workflows 5000

Runs ``bench/throughput.py``'s measurement (a real supervisor with ``--shards`` shards,
``AsyncClient``, durable commits) and then ``bench/peers/dbos_throughput.py`` (DBOS 3.4 on its
SQLite system database, durable; in a child process, so DBOS's global state stays there),
each with N workflows, one after the other on this machine. With ``--store URL`` both run on
that PostgreSQL server: weft_actors in a fresh schema, DBOS in a fresh database.

Prints one JSON line on stdout: ``{"workflows", "weft": {...}, "dbos": {...}, "ratio"}``,
where ``ratio`` is weft's workflows/s over DBOS's (a readable table on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from typing import Any

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

from _harness import sigterm_as_exit, table  # noqa: E402
from _pgstore import scratch_database, scratch_schema  # noqa: E402
from throughput import run_once  # noqa: E402


def run_peer(workflows: int, concurrency: int, timeout: float, system_database: str | None = None) -> dict[str, Any]:
    command = [sys.executable, os.path.join(BENCH, "peers", "dbos_throughput.py"), "--workflows", str(workflows), "--concurrency", str(concurrency)]
    if system_database:
        command += ["--system-database", system_database]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        out, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        return {"error": f"the DBOS peer failed (exit {process.returncode})"}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=5000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=1000, help="weft_actors: workflows in flight")
    parser.add_argument("--peer-concurrency", type=int, default=1, help="DBOS: workflows in flight (1 is its fastest here)")
    parser.add_argument("--peer-timeout", type=float, default=1800.0)
    parser.add_argument("--store", metavar="URL", help="a PostgreSQL URL: weft_actors on a fresh schema there, DBOS on a fresh database of that server")
    args = parser.parse_args()
    with sigterm_as_exit(), contextlib.ExitStack() as stack:
        supervisor_args: tuple[str, ...] = ()
        peer_database = None
        if args.store:
            supervisor_args = ("--store", stack.enter_context(scratch_schema(args.store)))
            peer_database = stack.enter_context(scratch_database(args.store))
        ours = run_once(args.workflows, args.shards, 3, args.concurrency, 1, min(1000, args.workflows // 10), supervisor_args, database_url=args.store)
        ours.pop("cpu_by_process", None)
        table(ours, "weft_actors")
        peer = run_peer(args.workflows, args.peer_concurrency, args.peer_timeout, peer_database)
        table(peer, "DBOS (PostgreSQL)" if peer_database else "DBOS (SQLite)")
    ratio = None
    if peer.get("workflows_per_s"):
        ratio = round(ours["workflows_per_s"] / peer["workflows_per_s"], 1)
    result = {"workflows": args.workflows, "weft": ours, "dbos": peer, "ratio": ratio}
    sys.stderr.write(f"ratio (weft_actors / DBOS workflows per second): {ratio}\n")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
