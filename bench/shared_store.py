"""What sharing one LMDB store costs engines that run side by side: the scaling ceiling of
shards on one host, without the wire.

    python bench/shared_store.py --engines 2 --workflows 40000 --in-flight 500

Runs ``--engines`` in-process engines in as many processes (``engine_throughput.run``, the
same three-step workflows, durable commits), their timed parts started together, three ways:

- ``alone``: one engine by itself (the reference);
- ``separate``: each engine on a store of its own (one LMDB environment each);
- ``shared``: all on one store, as the shards of one supervisor are (one LMDB environment,
  whose single write lock each commit holds through its fsync).

``--in-flight`` is per engine (the default, 500, is what each of 2 shards holds in
``throughput.py``'s default run). Prints one JSON line per way: engines, workflows_per_s
(all engines together: their workflows over the longest timed part), per_engine (each one's
own figures) and vs_alone (workflows_per_s over the ``alone`` figure), then a table on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import report  # noqa: E402

WAYS = ("alone", "separate", "shared")


def _engine(data_dir: str, workflows: int, in_flight: int, go: Any, answers: Any) -> None:
    """One engine's run, in its own process: open, wait for the others, run, report."""
    import uvloop

    from engine_throughput import run

    async def ready() -> None:
        await asyncio.get_running_loop().run_in_executor(None, go.wait)

    answers.put(uvloop.run(run(workflows, data_dir, 3, in_flight, ready=ready)))


def measure(way: str, engines: int, workflows: int, in_flight: int) -> dict[str, Any]:
    count = 1 if way == "alone" else engines
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    answers = context.Queue()
    root = tempfile.mkdtemp(prefix="weft-shared-store-")
    try:
        dirs = [os.path.join(root, "store" if way == "shared" else f"store-{index}") for index in range(count)]
        children = [context.Process(target=_engine, args=(path, workflows, in_flight, go, answers)) for path in dirs]
        for child in children:
            child.start()
        try:
            go.set()  # each engine waits for it once open (``ready``), so the timed parts overlap
            results = [answers.get(timeout=600) for _ in children]
        finally:
            for child in children:
                child.join(timeout=30)
                if child.is_alive():
                    child.kill()
                    child.join()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = max(result["seconds"] for result in results)
    return {
        "way": way,
        "engines": count,
        "workflows": workflows * count,
        "in_flight_per_engine": in_flight,
        "seconds": seconds,
        "workflows_per_s": round(workflows * count / seconds, 1),
        "per_engine": [
            {key: result[key] for key in ("workflows_per_s", "cpu_us_per_workflow", "commits", "writes_per_commit")}
            for result in results
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--workflows", type=int, default=40_000, help="per engine")
    parser.add_argument("--in-flight", type=int, default=500, help="workflows going at a time, per engine")
    args = parser.parse_args()
    alone = None
    for way in WAYS:
        result = measure(way, args.engines, args.workflows, args.in_flight)
        if alone is None:
            alone = result["workflows_per_s"]
        result["vs_alone"] = round(result["workflows_per_s"] / alone, 2)
        report(result)


if __name__ == "__main__":
    main()
