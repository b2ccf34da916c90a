"""The console's Workflows page with many workflows in the store: what a page costs, and what
the front door keeps while the console is hammered.

    python bench/console_list.py --workflows 200000

Fills a fresh store with N finished workflows (three types, five terminal statuses, ``updated``
spread over a week: the records and their index entries, written straight into the store in a
setup phase), starts a real supervisor with ``--http`` on it, and measures:

- GET latency of the list, newest first: the HTML page and the JSON API, unfiltered and
  filtered by status, type and id prefix, first and second page (p50 and p99, ms, requests
  100 ms apart), the index entries a page read (``scanned``) and its read time (``read_ms``);
- serial starts through the front door (starts/s) and ping latency (p50, p99), in interleaved
  rounds without and with ``--clients`` processes each requesting list pages back to back;
- the supervisor's resident memory at the end.

Prints one JSON line and a readable table on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, free_port, percentile, report  # noqa: E402
from weft_actors import Client  # noqa: E402
from weft_actors.codec import pack_record  # noqa: E402
from weft_actors.store._env import close_environment, open_environment  # noqa: E402
from weft_actors.store._keys import visibility_key, visibility_value  # noqa: E402
from weft_actors.store._migrate import rebuild_counts  # noqa: E402
try:
    from weft_actors.store import _recent
except ImportError:  # a tree before the recent index (schema 5): measured for comparison
    _recent = None  # type: ignore[assignment]

_TYPES = ("hello", "order", "three_steps")
_STATUSES = ("completed",) * 6 + ("failed", "cancelled", "terminated", "timed_out")
_HAMMERED = tuple(os.environ["HAMMER_PATHS"].split(",")) if os.environ.get("HAMMER_PATHS") else ("/api/workflows?limit=50", "/workflows", "/api/workflows?status=failed&limit=50", "/api/workflows?type=order&limit=50")
_CHUNK = 20_000


def fill(data_dir: str, workflows: int) -> None:
    """N finished workflows, each a record and its visibility entry, then the ``recent`` index
    and the counts derived from them, as the store's own upgrade derives them."""
    env, dbs = open_environment(data_dir)
    rng = random.Random(7)
    now = time.time()
    try:
        for first in range(0, workflows, _CHUNK):
            with env.begin(write=True) as txn:
                for i in range(first, min(workflows, first + _CHUNK)):
                    wid, status, wf_type = f"order-{i:07d}", rng.choice(_STATUSES), rng.choice(_TYPES)
                    updated = now - rng.random() * 7 * 86400
                    record = {"type": wf_type, "args": b"\x90", "status": status, "run_id": f"{i:032x}", "created": updated - 1,
                              "updated": updated, "memo": None, "parent": None, "start_at": None, "deadline": None,
                              "result": None, "error": None}
                    txn.put(wid.encode(), pack_record(record), db=dbs.workflows)
                    txn.put(visibility_key(status, wf_type, wid), visibility_value(updated), db=dbs.visibility)
        with env.begin(write=True) as txn:
            if _recent is not None:
                _recent.rebuild_recent(txn, dbs)
            rebuild_counts(txn, dbs)
    finally:
        close_environment(data_dir)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as reply:
        return bytes(reply.read())


def _time(url: str, repeat: int) -> tuple[list[float], list[bytes]]:
    """``repeat`` GETs, 100 ms apart as a person clicks (back to back, the console paces its
    reads: the wait for a turn would be timed, not the page)."""
    took, bodies = [], []
    for _ in range(repeat):
        time.sleep(0.1)
        started = time.perf_counter()
        bodies.append(_get(url))
        took.append((time.perf_counter() - started) * 1000)
    return took, bodies


def hammer(base: str) -> None:
    """A list client: pages back to back until killed; one line on stdout once it is going."""
    told = False
    for n in range(1 << 62):
        _get(base + _HAMMERED[n % len(_HAMMERED)])
        if not told:
            print("going", flush=True)
            told = True


def _front_door(client: Client, seconds: float, run: str, pings: int) -> tuple[float, list[float]]:
    """Serial starts for ``seconds`` (starts/s), then ``pings`` serial pings (ms each)."""
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        client.start("hello", "bench", id=f"{run}-{done}")
        done += 1
    rate = done / (time.perf_counter() - started)
    took = []
    for _ in range(pings):
        at = time.perf_counter()
        client.ping()
        took.append((time.perf_counter() - at) * 1000)
    return rate, took


def _hammering(base: str, clients: int) -> list[subprocess.Popen[str]]:
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hammer", base], stdout=subprocess.PIPE, text=True) for _ in range(clients)]
    for proc in procs:
        if proc.stdout is None or proc.stdout.readline().strip() != "going":
            raise RuntimeError("a list client did not start")
    return procs


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait(timeout=30)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=20, help="GETs per page measured")
    parser.add_argument("--clients", type=int, default=6, help="list clients hammering the console")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds without and with them")
    parser.add_argument("--seconds", type=float, default=3.0, help="of serial starts per round")
    parser.add_argument("--hammer", metavar="BASE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hammer:
        hammer(args.hammer)
        return
    port = free_port()
    service = Supervisor(shards=1, app="weft_actors.examples", args=("--http", f"127.0.0.1:{port}"))
    fill_started = time.perf_counter()
    fill(service.data_dir, args.workflows)  # before it starts: the store it opens holds them
    results: dict[str, object] = {"workflows": args.workflows, "repeat": args.repeat, "fill_s": round(time.perf_counter() - fill_started, 1)}
    with service:
        base = f"http://127.0.0.1:{port}"
        first = json.loads(_get(f"{base}/api/workflows?limit=50"))
        cases = {
            "page_html": f"{base}/workflows",
            "api_all": f"{base}/api/workflows?limit=50",
            "api_second_page": f"{base}/api/workflows?limit=50&cursor={first['cursor']}",
            "api_status_failed": f"{base}/api/workflows?status=failed",
            "api_type_order": f"{base}/api/workflows?type=order",
            "api_prefix": f"{base}/api/workflows?prefix=order-00012",
            "overview_html": f"{base}/",
        }
        for name, url in cases.items():
            took, bodies = _time(url, args.repeat)
            results[f"{name}_ms_p50"] = round(statistics.median(took), 1)
            results[f"{name}_ms_p99"] = round(percentile(took, 0.99), 1)
            if name.startswith("api_"):
                pages = [json.loads(body) for body in bodies]
                results[f"{name}_scanned"] = pages[-1].get("scanned")
                reads = [page["read_ms"] for page in pages if "read_ms" in page]
                results[f"{name}_read_ms_p50"] = round(statistics.median(reads), 2) if reads else None
        rates: dict[str, list[float]] = {"alone": [], "hammered": []}
        pings: dict[str, list[float]] = {"alone": [], "hammered": []}
        with Client(service.endpoint, timeout=30) as client:
            client.start("hello", "warm-up", id="warm-up")
            for round_ in range(args.rounds):
                for mode in ("alone", "hammered"):
                    procs = _hammering(base, args.clients) if mode == "hammered" else []
                    try:
                        rate, took = _front_door(client, args.seconds, f"{mode}-{round_}", 200)
                    finally:
                        _stop(procs)
                    rates[mode].append(rate)
                    pings[mode] += took
        for mode in ("alone", "hammered"):
            results[f"starts_per_s_{mode}"] = round(statistics.median(rates[mode]), 1)
            results[f"ping_ms_p50_{mode}"] = round(statistics.median(pings[mode]), 2)
            results[f"ping_ms_p99_{mode}"] = round(percentile(pings[mode], 0.99), 2)
        results["starts_ratio"] = round(statistics.median(rates["hammered"]) / statistics.median(rates["alone"]), 3)
        results["supervisor_rss_mb"] = _rss_mb(service.process.pid) if service.process is not None else None
    report(results, f"console list, {args.workflows} workflows, {args.clients} list clients")


if __name__ == "__main__":
    main()
