"""The console's Workflows page with many workflows in the store: how long one page takes.

    python bench/console_list.py --workflows 100000

Fills a fresh store's visibility index with N finished workflows (three types, five terminal
statuses, ``updated`` spread over a week), starts a real supervisor with ``--http`` on it, and
times GET requests of the list, newest first: the HTML page and the JSON API, unfiltered and
filtered by status, type and id prefix, first and second page. Prints one JSON line: the
median and worst milliseconds of each (the budget is 200 ms for the list page at 100,000).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, free_port, report  # noqa: E402
from weft_actors.codec import pack_record  # noqa: E402
from weft_actors.store._env import close_environment, open_environment  # noqa: E402
from weft_actors.store._keys import visibility_key, visibility_value  # noqa: E402

_TYPES = ("hello", "order", "three_steps")
_STATUSES = ("completed",) * 6 + ("failed", "cancelled", "terminated", "timed_out")


def fill(data_dir: str, workflows: int) -> None:
    """N finished workflows, each a record and its visibility entry, in one transaction."""
    env, dbs = open_environment(data_dir)
    rng = random.Random(7)
    now = time.time()
    try:
        with env.begin(write=True) as txn:
            for i in range(workflows):
                wid, status, wf_type = f"order-{i:07d}", rng.choice(_STATUSES), rng.choice(_TYPES)
                updated = now - rng.random() * 7 * 86400
                record = {"type": wf_type, "args": b"\x90", "status": status, "run_id": f"{i:032x}", "created": updated - 1,
                          "updated": updated, "memo": None, "parent": None, "start_at": None, "deadline": None,
                          "result": None, "error": None}
                txn.put(wid.encode(), pack_record(record), db=dbs.workflows)
                txn.put(visibility_key(status, wf_type, wid), visibility_value(updated), db=dbs.visibility)
    finally:
        close_environment(data_dir)


def _time(url: str, repeat: int) -> tuple[list[float], bytes]:
    took, body = [], b""
    for _ in range(repeat):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as reply:
            body = reply.read()
        took.append((time.perf_counter() - started) * 1000)
    return took, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    port = free_port()
    service = Supervisor(shards=1, app="weft_actors.examples", args=("--http", f"127.0.0.1:{port}"))
    fill(service.data_dir, args.workflows)  # before it starts: the store it opens holds them
    with service:
        base = f"http://127.0.0.1:{port}"
        _, first = _time(f"{base}/api/workflows?limit=50", 1)
        cursor = json.loads(first)["cursor"]
        cases = {
            "page_html": f"{base}/workflows",
            "api_all": f"{base}/api/workflows?limit=50",
            "api_second_page": f"{base}/api/workflows?limit=50&cursor={cursor}",
            "api_status_failed": f"{base}/api/workflows?status=failed",
            "api_type_order": f"{base}/api/workflows?type=order",
            "api_prefix": f"{base}/api/workflows?prefix=order-00012",
            "overview_html": f"{base}/",
        }
        results: dict[str, object] = {"workflows": args.workflows, "repeat": args.repeat}
        for name, url in cases.items():
            took, _ = _time(url, args.repeat)
            results[f"{name}_ms_p50"] = round(statistics.median(took), 1)
            results[f"{name}_ms_max"] = round(max(took), 1)
    report(results)


if __name__ == "__main__":
    main()
