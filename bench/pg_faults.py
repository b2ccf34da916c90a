"""PostgreSQL fault runs with two supervisors: each scenario on a fresh server, under a steady
load through both front doors, with the database as the fault. One JSON line per scenario on
stdout, a readable table on stderr.

Scenarios (``--scenario NAME``, repeatable; default all):

- ``restart_10s``, ``restart_30s``: ``pg_ctl stop -m fast``, down 10 s / 30 s, ``pg_ctl start``;
- ``drops``: 10 connection drops a minute (``pg_terminate_backend``) for 2 minutes;
- ``read_only``: the server refuses writes for 15 s (``default_transaction_read_only``);
- ``down_kill``: the server down for 20 s, a shard SIGKILLed 5 s into it;
- ``stop_backend``: one backend SIGSTOPped for 45 s (the write lock's holder, if caught).

Each reports: supervisor exits, engines deposed, shards killed (by reason, from the
supervisors' ``is hung: <reason>; killing it`` lines) and shard exits (by code), acknowledged
workflows, completed exactly once, lost, duplicated, quarantined, and the invariant checker's
result. A run is ``clean`` when the supervisors stayed up, no engine was deposed, no shard was
killed as hung, every acknowledged workflow completed exactly once, nothing is quarantined and
the checker found nothing. The supervisors run the defaults (heartbeat 0.5 s, ttl 3 s, five
restarts a 30 s window) and the app of the two-hosts tests (``tests/two_hosts_app.py``), whose
activities log each execution, so "exactly once" is proven, not assumed (``tests/_two_hosts``).

    PYTHONPATH=. python bench/pg_faults.py [--scenario drops] [--rate 4] [--shards 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable

BENCH = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(BENCH), "tests")
for _path in (BENCH, TESTS):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _harness import report, scratch_dir, sigterm_as_exit  # noqa: E402
from _pg_faults_inject import BENCH_APP, Faults  # noqa: E402
from _pg_faults_load import SteadyLoad, shard_pids  # noqa: E402

SCENARIOS: dict[str, Callable[[Faults, float], dict[str, Any]]] = {
    "restart_10s": lambda faults, scale: faults.restart(10.0 * scale),
    "restart_30s": lambda faults, scale: faults.restart(30.0 * scale),
    "drops": lambda faults, scale: faults.drops(10.0, 120.0 * scale),
    "read_only": lambda faults, scale: faults.read_only(15.0 * scale),
    "down_kill": lambda faults, scale: faults.down_with_kill(20.0 * scale, 5.0 * scale),
    "stop_backend": lambda faults, scale: faults.stop_backend(45.0 * scale),
}
"""Each scenario's fault; ``scale`` (``--scale``, 1 by default) shortens its durations."""
WARM_UP, COOL_DOWN = 5.0, 5.0
"""Seconds of load before each fault and after it, before the load stops."""
DEPOSED = re.compile(r"engine (\w+) deposed: (.*)")
HUNG = re.compile(r"shard \d+ \(pid \d+, engine \w+\) is hung: (.*); killing it")
EXITED = re.compile(r"shard \d+ \(pid \d+\) exited with code (-?\d+)")


def _normalize(reason: str) -> str:
    """A kill's reason without its numbers, so that alike reasons count together."""
    return re.sub(r"[0-9]+(\.[0-9]+)?", "N", reason).strip()


def log_counts(lines: list[str]) -> dict[str, Any]:
    """What the supervisors' logs (theirs and their shards') say happened to the shards."""
    deposed: set[str] = set()
    killed: collections.Counter[str] = collections.Counter()
    exits: collections.Counter[str] = collections.Counter()
    intensity = 0
    for line in lines:
        if (found := DEPOSED.search(line)) is not None:
            deposed.add(found.group(1))
        elif (found := HUNG.search(line)) is not None:
            killed[_normalize(found.group(1))] += 1
        elif (found := EXITED.search(line)) is not None:
            exits[found.group(1)] += 1
        elif "restart intensity exceeded" in line:
            intensity += 1
    return {"engines_deposed": len(deposed), "shards_killed": dict(killed), "shard_exits": dict(exits), "restart_intensity_exceeded": intensity}


def _tail(lines: list[str], pattern: re.Pattern[str], n: int = 3) -> list[str]:
    return [line.strip()[:300] for line in lines if pattern.search(line)][:n]


def run_scenario(name: str, args: argparse.Namespace, bindir: str) -> dict[str, Any]:
    import two_hosts_app
    from _postgres import PostgresServer
    from _processes import RunningSupervisor
    from _two_hosts import APP, TIMING, check_invariants, judge, read_executions

    from weft_actors.store import open_store

    rng = random.Random(f"{args.seed}-{name}")
    began = time.monotonic()
    with PostgresServer(bindir) as server, scratch_dir(prefix="weft-pg-faults-") as logs:
        env = {two_hosts_app.LOG_ENV: logs}
        hosts = [
            RunningSupervisor(server.url, shards=args.shards, app=APP, args=(*TIMING, "--log-level", args.log_level), env=env)
            for _ in range(2)
        ]
        stop = threading.Event()
        load = SteadyLoad([host.endpoint for host in hosts], rate=args.rate, seed=args.seed, prefix=name)
        store = None
        try:
            for host in hosts:
                host.start(timeout=60)

            def kill_shard() -> int | None:
                process = hosts[0].process
                pids = shard_pids(process.pid) if process is not None else []
                if not pids:
                    return None
                victim = rng.choice(pids)
                os.kill(victim, signal.SIGKILL)
                return victim

            faults = Faults(server, server.url, rng, kill_shard, stop)
            load.start()
            time.sleep(WARM_UP)
            fault = SCENARIOS[name](faults, args.scale)
            time.sleep(COOL_DOWN)
            load.stop()
            store = open_store(f"{server.url}?application_name={BENCH_APP}", readonly=True)
            acked = load.acknowledged_specs()
            finished = _wait_completed(store, len(acked), args.finish_timeout)
            exits = [code for host in hosts if host.process is not None and (code := host.process.poll()) is not None]
            counts = store.workflow_counts()
            quarantined = sum(n for (status, _), n in counts.items() if status == "quarantined")
            unfinished = [] if finished else _describe_unfinished(store, acked)  # while its holder runs
            for host in hosts:
                if host.process is not None and host.process.poll() is None:
                    host.terminate(60)
            executions = read_executions(logs)
            verdict = judge(store, acked, executions, set())
            lost = [p for p in verdict.problems if ": lost" in p]
            duplicated = [p for p in verdict.problems if "twice" in p or "not from one execution" in p]
            other = [p for p in verdict.problems if p not in lost and p not in duplicated]
            checker = check_invariants(server.url)
        finally:
            stop.set()
            load.stop()
            if store is not None:
                store.close()
            for host in hosts:
                host.kill()
        lines = [line for host in hosts for line in host.stderr_lines]
        seen = log_counts(lines)
        result: dict[str, Any] = {
            "bench": "pg_faults", "scenario": name, "seed": args.seed, "shards_per_supervisor": args.shards, "scale": args.scale,
            "fault": fault,
            "supervisor_exits": len(exits), "supervisor_exit_codes": exits,
            **seen,
            "acknowledged": len(acked), "starts_unanswered": load.unanswered, "completed_once": len(acked) - len({p.split()[0].rstrip(":") for p in verdict.problems}),
            "lost": len(lost), "duplicated": len(duplicated), "other_problems": len(other), "quarantined": quarantined,
            "all_completed_in_time": finished, "activity_reexecutions": verdict.reexecuted,
            "checker": "clean" if not checker else f"{len(checker)} problem(s)",
            "load_errors": load.errors[:3],
        }
        result["clean"] = (
            not exits and not seen["engines_deposed"] and not seen["shards_killed"] and not verdict.problems
            and not quarantined and not checker and not load.errors and finished
        )
        if not result["clean"]:
            result["logs"] = _keep_logs(name, hosts, server)
        evidence = unfinished[:3] + verdict.problems[:3] + checker[:3] + _tail(lines, DEPOSED) + _tail(lines, HUNG) + _tail(lines, re.compile("restart intensity|cannot start|cannot reach"))
        if evidence:
            result["evidence"] = evidence
        result["elapsed_s"] = round(time.monotonic() - began, 1)
        return result


def _describe_unfinished(store: Any, specs: list[Any]) -> list[str]:
    """Each workflow not completed: its status, holder and claim epoch, and that engine's
    record (read before the supervisors stop, while the holder still runs)."""
    engines = store.engines()
    lines = []
    for spec in specs:
        record = store.get_workflow(spec.wid)
        if record is not None and record["status"] == "completed":
            continue
        holder = store.get_holder(spec.wid)
        engine = engines.get(holder[0]) if holder else None
        state = None if engine is None else {k: engine.get(k) for k in ("pid", "state", "expires_at")}
        status = None if record is None else record["status"]
        lines.append(f"{spec.wid}: {status}, holder {holder} (engine {state}) epoch {store.get_epoch(spec.wid)}, now {time.time():.1f}")
    if lines:
        lines.append("engines: " + ", ".join(f"{engine_id[:8]} {record.get('state')} pid {record.get('pid')}" for engine_id, record in engines.items()))
    return lines


def _keep_logs(name: str, hosts: list[Any], server: Any) -> str:
    """The supervisors' and the server's logs of an unclean run, kept in a new directory."""
    import shutil

    directory = tempfile.mkdtemp(prefix=f"weft-pg-faults-{name}-")
    for index, host in enumerate(hosts):
        with open(os.path.join(directory, f"supervisor-{index}.log"), "w") as file:
            file.write("".join(host.stderr_lines))
    shutil.copyfile(server.log, os.path.join(directory, "postgres.log"))
    return directory


def _wait_completed(store: Any, count: int, timeout: float, stall: float = 60.0) -> bool:
    """Until ``count`` relays are completed (the store's own counts): False after ``timeout``
    s, or once none completed for ``stall`` s (a wedged cluster fails in a minute)."""
    deadline = time.monotonic() + timeout
    last, progressed = -1, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - progressed < stall:
        try:
            done = store.workflow_counts().get(("completed", "relay"), 0)
        except Exception:  # a read the server just restarted under: the next one reconnects
            done = last
        if done >= count:
            return True
        if done != last:
            last, progressed = done, time.monotonic()
        time.sleep(0.5)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shards", type=int, default=2, help="shards per supervisor (default 2)")
    parser.add_argument("--rate", type=float, default=4.0, help="workflow starts a second, over both front doors (default 4)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every fault's durations (a quick look: 0.25)")
    parser.add_argument("--log-level", default="WARNING", help="the supervisors' (kept for an unclean run; INFO names each engine and takeover)")
    parser.add_argument("--finish-timeout", type=float, default=180.0, help="seconds after the load for every acknowledged workflow to complete")
    args = parser.parse_args()
    from _postgres import find_bindir

    bindir = find_bindir()
    if bindir is None:
        parser.error("PostgreSQL is not installed (initdb, pg_ctl)")
    clean = True
    with sigterm_as_exit():
        for name in args.scenario or list(SCENARIOS):
            try:
                result = run_scenario(name, args, bindir)
            except Exception as exc:  # the bench's own failure: said, and the next scenario runs
                result = {"bench": "pg_faults", "scenario": name, "clean": False, "error": f"{type(exc).__name__}: {exc}"}
            report(result, f"pg_faults: {name}")
            clean = clean and result["clean"]
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
