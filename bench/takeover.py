"""Takeover: N in-flight workflows, then kill -9 (or SIGSTOP) the shard that owns the most.

    python bench/takeover.py --workflows 5000 --shards 2 --mode kill
    python bench/takeover.py --workflows 5000 --shards 2 --mode stall

Serves ``bench_app`` from a supervisor on a free loopback port and a temporary data directory
(durable commits, default heartbeat 0.5 s and ttl 3 s). Each workflow ``held`` runs an
activity, sleeps ``--pause``, runs another, then parks in a durable timer that fires at a time
W the bench chose when it started them (``--lead`` seconds ahead); after W it runs an
activity, sleeps and runs a last one. Once all N are parked, the bench asks ``describe()``
for each owner, picks the shard (pid from ``stats()``) that owns the most, and at
T = W - 5 ms:

- ``kill``: sends SIGKILL; the supervisor reaps it, marks its engine dead, hints the others
  and restarts it, and live shards take its workflows over;
- ``stall``: sends SIGSTOP; the others take its workflows over once its lease has expired
  (``ttl + 2 x heartbeat`` after its last heartbeat, then the next reclaim pass). Once every
  workflow has finished (or the deadline passed) the shard gets SIGCONT, and the bench waits
  ``--after-cont`` seconds for whatever it still tries to do.

The victim's workflows are all parked in their timer at T, so their next op is that timer's
outcome, committed by the new owner as soon as it has taken them over (the timer is due by
then). Right after that commit the workflow records ``ctx.now()``: for each affected
workflow (owned by the victim at T) that stamp minus T is the time from the kill to its next
committed op. The survivors' own workflows wake at W too (a load spike during the
takeover); their stamp minus W is reported as ``unaffected_p50_ms`` for comparison.
Completion is watched read-only in the store (no request can hang on a stopped shard).

Afterwards the supervisor is stopped (SIGTERM) and the bench reads, read-only, every
workflow's record and op log (``LmdbStore(readonly=True)``) and the activities' execution
log (each execution appends a start and an end line with its pid and a unique token; see
``bench_app``). It reports:

- ``affected``; ``p50_ms``/``p99_ms``/``max_ms`` of their latencies; ``lost``: workflows (of
  all N) not completed by the deadline;
- ``duplicate_commits``: ops whose committed outcome differs from what the workflow consumed
  (LMDB keeps one version per op key, so a second commit shows as a changed outcome), plus op
  logs that are not the nine expected ops;
- ``activity_reexecutions``: executions beyond one per activity key (no activity is in flight
  at T, so 0 is expected);
- ``zombie_commits`` (stall): writes that landed after SIGCONT, when every workflow had
  already finished: stored op outcomes carrying a token the victim produced after SIGCONT or
  a ``now`` stamp taken after it, and workflow records updated after it;
  ``victim_late_executions`` counts activities the victim started after SIGCONT (user code
  run by a deposed engine; allowed by the design, but none is expected here).

Prints one JSON line on stdout (and a readable table plus progress bars on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime as dt
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, open_store_readonly, percentile, report, sigterm_as_exit, system_busy_seconds  # noqa: E402
from _progress import Progress  # noqa: E402

EXPECTED_OPS = 9  # work, sleep, work, now, sleep (parked), now, work, sleep, work
VALUE_SEQS = (0, 2, 3, 5, 6, 8)  # the ops whose outcomes the workflow returns, in order
NOW_SEQS = (3, 5)
PARK_MARK = "/2"  # the key of the activity right before the workflow parks ends in its seq


def read_exec_log(directory: str) -> list[tuple[str, str, int, float, str | None]]:
    """(kind S/E, idempotency key, pid, time, token or None) of every activity execution."""
    lines = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 4:
                    continue  # a line torn by kill -9
                lines.append((parts[0], parts[1], int(parts[2]), float(parts[3]), parts[4] if len(parts) > 4 else None))
    return lines


def count_parked(directory: str) -> int:
    keys = set()
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                parts = line.split("\t")
                if parts[0] == "E" and len(parts) >= 5 and parts[1].endswith(PARK_MARK):
                    keys.add(parts[1])
    return len(keys)


async def start_all(endpoint: str, workflows: int, wake_at: float, pause: float, concurrency: int) -> list[str]:
    from weft_actors import AsyncClient

    progress = Progress(workflows, "started")
    ids = [f"held-{i}" for i in range(workflows)]
    async with AsyncClient(endpoint, timeout=60) as client:
        queue = iter(ids)

        async def worker() -> None:
            for wid in queue:
                await client.start("held", wake_at, pause, id=wid)
                progress.advance()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ids


async def owners(endpoint: str, ids: list[str]) -> tuple[dict[str, str | None], dict[str, Any]]:
    from weft_actors import AsyncClient

    found: dict[str, str | None] = {}
    async with AsyncClient(endpoint, timeout=60) as client:
        queue = iter(ids)

        async def worker() -> None:
            for wid in queue:
                found[wid] = (await client.get_handle(wid).describe())["owner"]

        await asyncio.gather(*(worker() for _ in range(200)))
        stats = await client.stats()
    return found, stats


def wait_parked(log_dir: str, workflows: int, deadline: float) -> None:
    """Until every workflow has run the activity right before its park (then a short grace
    for the park's own commit); ``RuntimeError`` if that is not done by ``deadline``."""
    progress = Progress(workflows, "parked")
    seen = 0
    while True:
        parked = count_parked(log_dir)
        if parked > seen:
            progress.advance(parked - seen)
            seen = parked
        if parked >= workflows:
            time.sleep(0.3)
            return
        if time.time() > deadline:
            raise RuntimeError(f"only {parked}/{workflows} workflows parked in time: raise --lead")
        time.sleep(0.1)


def wait_completed(store: Any, ids: list[str], timeout: float, label: str) -> int:
    """Watch the visibility index read-only until every workflow completed or the deadline."""
    progress = Progress(len(ids), label)
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        done = len(store.list_workflows(status="completed", wf_type="held", limit=len(ids) + 1)["items"])
        if done > seen:
            progress.advance(done - seen)
            seen = done
        if done >= len(ids) or time.monotonic() > deadline:
            if done < len(ids):
                sys.stderr.write(f"\n{label}: {done}/{len(ids)} completed by the deadline\n")
            return done
        time.sleep(0.02)


def victim_exit(log: str, pid: int) -> tuple[str | None, float | None]:
    """The exit code the supervisor logged for the victim ("-9" killed, "4" deposed) and the
    time of that log line (epoch seconds; the log's UTC timestamps have ms resolution)."""
    marker = f"(pid {pid}) exited with code "
    for line in log.splitlines():
        if marker in line:
            try:
                stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=dt.timezone.utc).timestamp()
            except ValueError:
                stamp = None
            return line.split(marker)[1].strip(), stamp
    return None, None


def _plain(value: Any) -> Any:
    return value.timestamp() if isinstance(value, dt.datetime) else value


def analyse(data_dir: str, log_dir: str, ids: list[str], affected: list[str], victim_pid: int, t_event: float, wake_at: float, t_cont: float | None) -> dict[str, Any]:
    from weft_actors.codec import decode

    store = open_store_readonly(data_dir)
    executions = read_exec_log(log_dir)
    try:
        starts = collections.Counter(key for kind, key, *_ in executions if kind == "S")
        reexecutions = sum(n - 1 for n in starts.values() if n > 1)
        late_tokens: set[str] = set()
        late_starts = 0
        if t_cont is not None:
            late_tokens = {token for kind, _, pid, at, token in executions if kind == "E" and pid == victim_pid and at >= t_cont and token}
            late_starts = sum(1 for kind, _, pid, at, _ in executions if kind == "S" and pid == victim_pid and at >= t_cont)
        duplicates = bad_history = zombies = lost = 0
        latencies: list[float] = []
        unaffected: list[float] = []
        affected_set = set(affected)
        for wid in ids:
            record = store.get_workflow(wid)
            if record is None or record["status"] != "completed":
                lost += 1
                continue
            consumed = decode(record["result"])
            ops = store.load_ops(wid, record["run_id"])
            if len(ops) != EXPECTED_OPS:
                bad_history += 1
            for seq, value in zip(VALUE_SEQS, consumed):
                op = ops.get(seq)
                stored = _plain(decode(op["ok"])) if op is not None and op.get("ok") is not None else None
                if stored != value:
                    duplicates += 1
                if t_cont is not None and stored is not None:
                    if (seq in NOW_SEQS and stored >= t_cont) or stored in late_tokens:
                        zombies += 1
            if t_cont is not None and record.get("updated", 0) >= t_cont:
                zombies += 1
            stamp = consumed[3]
            if wid in affected_set:
                latencies.append((stamp - t_event) * 1000)
            else:
                unaffected.append((stamp - wake_at) * 1000)
        return {
            "latencies": latencies,
            "unaffected_p50_ms": round(percentile(unaffected, 0.50), 1),
            "lost": lost,
            "duplicate_commits": duplicates + bad_history,
            "activity_reexecutions": reexecutions,
            "zombie_commits": zombies,
            "victim_late_executions": late_starts,
        }
    finally:
        store.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import uvloop

    from weft_actors import Client

    work_dir = tempfile.mkdtemp(prefix="weft-takeover-")
    log_dir = os.path.join(work_dir, "log")
    os.makedirs(log_dir)
    env = {"WEFT_BENCH_LOG": log_dir}
    timing = ("--heartbeat", str(args.heartbeat), "--ttl", str(args.ttl))
    lead = args.lead if args.lead is not None else 3.0 + 1.5 * args.workflows / 1000
    supervisor = Supervisor(shards=args.shards, args=timing, env=env, keep_data=True)
    victim_pid = 0
    stopped = False
    try:
        with supervisor:
            try:
                wake_at = time.time() + lead
                ids = uvloop.run(start_all(supervisor.endpoint, args.workflows, wake_at, args.pause, 200))
                wait_parked(log_dir, args.workflows, wake_at - 1.0)
                owner_of, stats = uvloop.run(owners(supervisor.endpoint, ids))
                supervisor.note_pids(stats)
                pid_of = {shard["engine_id"]: shard["pid"] for shard in stats["shards"]}
                counts = collections.Counter(owner for owner in owner_of.values() if owner is not None)
                if not counts:
                    raise RuntimeError("no workflow has an owner")
                victim_engine, _ = counts.most_common(1)[0]
                victim_pid = int(pid_of[victim_engine])
                affected = [wid for wid, owner in owner_of.items() if owner == victim_engine]
                survivors = sorted(int(pid) for engine, pid in pid_of.items() if engine != victim_engine)
                store = open_store_readonly(supervisor.data_dir)
                try:
                    if time.time() > wake_at - 0.05:
                        raise RuntimeError("the wake time passed before the kill: raise --lead")
                    cpu_before = supervisor.cpu()
                    client_before = time.process_time()
                    busy_before = system_busy_seconds()
                    time.sleep(max(0.0, wake_at - 0.005 - time.time()))
                    t_event = time.time()
                    os.kill(victim_pid, signal.SIGKILL if args.mode == "kill" else signal.SIGSTOP)
                    stopped = args.mode == "stall"
                    done = wait_completed(store, ids, args.timeout, "finished after the " + args.mode)
                    all_done_s = time.time() - t_event
                    busy = system_busy_seconds() - busy_before
                    client_cpu = time.process_time() - client_before
                    time.sleep(1.1)  # shards push their stats to the supervisor once a second
                    with Client(supervisor.endpoint, timeout=10) as client:
                        after = client.stats()
                    supervisor.note_pids(after)  # the restarted shard
                    cpu_after = supervisor.cpu()
                    # CPU the rest of the machine took meanwhile (a disturbed run shows here);
                    # a killed victim's CPU after T is unknown and counted as ours: 0.
                    ours = client_cpu + sum(cpu_after[pid] - cpu_before.get(pid, 0.0) for pid in cpu_after if cpu_after[pid] > 0)
                    other_cpu = max(0.0, busy - ours)
                    shards_after = {
                        str(shard["pid"]): {
                            "takeovers": shard.get("claims_takeover"),
                            "reclaim_pass_max_ms": round(1000 * shard.get("reclaim_pass_seconds", {}).get("max", 0.0), 1),
                        }
                        for shard in after["shards"]
                        if shard.get("pid") and shard.get("engine_id") and int(shard["pid"]) != victim_pid
                    }
                    t_cont = None
                    if stopped:
                        t_cont = time.time()
                        os.kill(victim_pid, signal.SIGCONT)
                        stopped = False
                        time.sleep(args.after_cont)
                finally:
                    store.close()
                supervisor.terminate(30)
                time.sleep(0.2)  # let the log reader thread take the last lines
                victim_code, reaped_at = victim_exit(supervisor.log_tail(5000), victim_pid)
            finally:
                if stopped:
                    os.kill(victim_pid, signal.SIGCONT)
        found = analyse(supervisor.data_dir, log_dir, ids, affected, victim_pid, t_event, wake_at, t_cont)
    finally:
        supervisor.remove_data()
        shutil.rmtree(work_dir, ignore_errors=True)
    latencies = found.pop("latencies")
    result = {
        "mode": args.mode,
        "workflows": args.workflows,
        "shards": args.shards,
        "affected": len(affected),
        "p50_ms": round(percentile(latencies, 0.50), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1) if latencies else 0.0,
        "lost": found.pop("lost"),
        "duplicate_commits": found.pop("duplicate_commits"),
        "activity_reexecutions": found.pop("activity_reexecutions"),
        "zombie_commits": found.pop("zombie_commits"),
        "completed_by_deadline": done,
        "all_done_s": round(all_done_s, 3),
        "other_cpu_s": round(other_cpu, 2),
        "heartbeat": args.heartbeat,
        "ttl": args.ttl,
        "victim_pid": victim_pid,
        "survivor_pids": survivors,
        "victim_exit_code": victim_code,
        "victim_reaped_ms": None if reaped_at is None else round((reaped_at - t_event) * 1000, 1),
        "shards_after": shards_after,
        **found,
    }
    if args.mode == "stall":
        result["stall_bound_ms"] = round((args.ttl + 2 * args.heartbeat + 0.5) * 1000, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=5000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--mode", choices=("kill", "stall"), default="kill")
    parser.add_argument("--pause", type=float, default=0.2, help="each short sleep of the workflow (s)")
    parser.add_argument("--lead", type=float, default=None, help="seconds from the first start to the wake time (default 3 + 1.5 per 1000 workflows)")
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=120.0, help="deadline for every workflow to finish after T (s)")
    parser.add_argument("--after-cont", type=float, default=3.0, help="stall: seconds to watch after SIGCONT")
    args = parser.parse_args()
    if args.shards < 2:
        parser.error("a takeover needs --shards 2 or more")
    with sigterm_as_exit():
        result = run(args)
    report(result, f"takeover ({args.mode})")


if __name__ == "__main__":
    main()
