"""Takeover: N in-flight workflows, then kill -9 (or SIGSTOP) the shard, or the host, that owns the most.

    python bench/takeover.py --workflows 5000 --shards 2 --mode kill
    python bench/takeover.py --workflows 5000 --shards 2 --mode stall
    python bench/takeover.py --workflows 300 --store postgresql://... --supervisors 2 --mode kill
    python bench/takeover.py --workflows 300 --postgres --supervisors 2 --mode stall

Serves ``bench_app`` from a supervisor on a free loopback port and a temporary data directory
(durable commits, default heartbeat 0.5 s and ttl 3 s). ``--store URL`` puts the store in a
fresh schema of that PostgreSQL database instead (dropped afterwards); ``--postgres`` starts a
throwaway PostgreSQL server for the run (``tests/_postgres``) and does the same there.

Each workflow ``held`` runs an activity, sleeps ``--pause``, runs another, then parks in a
durable timer that fires at a time W the bench chose when it started them (``--lead``
seconds ahead); after W it runs an activity, sleeps and runs a last one. Once all N are
parked, the bench asks ``describe()`` for each owner, picks the shard (pid from ``stats()``)
that owns the most, and at T = W - 5 ms:

- ``kill``: sends SIGKILL; the supervisor reaps it, marks its engine dead, hints the others
  and restarts it, and live shards take its workflows over;
- ``stall``: sends SIGSTOP; the others take its workflows over once its lease has expired
  (``ttl + 2 x heartbeat`` after its last heartbeat, then the next reclaim pass; its
  supervisor kills it as hung after a ttl without a heartbeat). Once every workflow has
  finished (or the deadline passed) the shard gets SIGCONT if it is still there, and the bench
  waits ``--after-cont`` seconds for whatever it still tries to do.

``--supervisors N`` (N >= 2; a shared store, so ``--store`` or ``--postgres`` in practice)
starts N supervisors ("hosts": separate process groups and front doors) on the one store. The
workflows are started through all the front doors in turn, and the victim is the whole
process group (supervisor and shards) of the supervisor whose shards own the most: ``kill``
sends it SIGKILL (nobody is left to mark its engines dead: the survivors see its database
sessions end), ``stall`` sends it SIGSTOP and, once every workflow has finished, SIGCONT.

The victim's workflows are all parked in their timer at T, so their next op is that timer's
outcome, committed by the new owner as soon as it has taken them over (the timer is due by
then). Right after that commit the workflow records ``ctx.now()``: for each affected
workflow (owned by the victim at T) that stamp minus T is the time from the kill to its next
committed op. The survivors' own workflows wake at W too (a load spike during the
takeover); their stamp minus W is reported as ``unaffected_p50_ms`` for comparison.
Completion is watched read-only in the store (no request can hang on a stopped shard).

Afterwards the supervisors are stopped (SIGTERM) and the bench reads every workflow's record
and op log (``open_store``: LMDB read-only, or the PostgreSQL schema) and the activities' execution
log (each execution appends a start and an end line with its pid and a unique token; see
``bench_app``). It reports:

- ``affected``; ``p50_ms``/``p99_ms``/``max_ms`` of their latencies; ``lost``: workflows (of
  all N) not completed by the deadline;
- ``duplicate_commits``: ops whose committed outcome differs from what the workflow consumed
  (LMDB keeps one version per op key, so a second commit shows as a changed outcome), plus op
  logs that are not the nine expected ops;
- ``activity_reexecutions``: executions beyond one per activity key (no activity is in flight
  at T, so 0 is expected);
- ``target_p99_ms`` (ttl + 2 x heartbeat + 1 s: the bound a takeover must meet, kill or stall)
  and ``meets_target`` (p99 within it, nothing lost, no duplicate or zombie commit);
- ``zombie_commits`` (stall): writes that landed after SIGCONT, when every workflow had
  already finished: stored op outcomes carrying a token the victim produced after SIGCONT or
  a ``now`` stamp taken after it, and workflow records updated after it;
  ``victim_late_executions`` counts activities the victim started after SIGCONT (user code
  run by a deposed engine; allowed by the design, but none is expected here).

With ``--supervisors N`` the JSON also says ``supervisors``, ``store`` (``lmdb`` or
``postgresql``), ``victim_shard_pids`` (``victim_pid`` is then the victim supervisor's pid),
``victim_exit_code`` (kill: the supervisor's own, ``-9``; stall: each thawed shard's, from
its supervisor's log, e.g. ``4`` deposed or ``-9`` killed as hung) and ``database_cpu_s``.

Prints one JSON line on stdout (and a readable table plus progress bars on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

from _harness import Supervisor, percentile, report, scratch_dir, sigterm_as_exit, system_busy_seconds  # noqa: E402
from _pgstore import postgres_cpu_seconds, scratch_schema  # noqa: E402
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


async def start_all(endpoints: list[str], workflows: int, wake_at: float, pause: float, concurrency: int) -> list[str]:
    """Start ``held-0 .. held-N-1``, the workers taking the front doors in turn."""
    from weft_actors import AsyncClient

    progress = Progress(workflows, "started")
    ids = [f"held-{i}" for i in range(workflows)]
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(AsyncClient(endpoint, timeout=60)) for endpoint in endpoints]
        queue = iter(ids)

        async def worker(client: Any) -> None:
            for wid in queue:
                await client.start("held", wake_at, pause, id=wid)
                progress.advance()

        await asyncio.gather(*(worker(clients[i % len(clients)]) for i in range(concurrency)))
    return ids


async def owners(endpoints: list[str], ids: list[str]) -> tuple[dict[str, str | None], list[dict[str, Any]]]:
    """Each workflow's owner (asked through the first front door: the store knows them all)
    and each supervisor's ``stats()``, in the order of ``endpoints``."""
    from weft_actors import AsyncClient

    found: dict[str, str | None] = {}
    async with AsyncClient(endpoints[0], timeout=60) as client:
        queue = iter(ids)

        async def worker() -> None:
            for wid in queue:
                found[wid] = (await client.get_handle(wid).describe())["owner"]

        await asyncio.gather(*(worker() for _ in range(200)))
    stats = []
    for endpoint in endpoints:
        async with AsyncClient(endpoint, timeout=60) as client:
            stats.append(await client.stats())
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
    """Watch the store's workflow counts until every workflow completed or the deadline (a
    read never waits for a stopped process: no write lock is taken)."""
    progress = Progress(len(ids), label)
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        done = store.workflow_counts().get(("completed", "held"), 0)
        if done > seen:
            progress.advance(done - seen)
            seen = done
        if done >= len(ids) or time.monotonic() > deadline:
            if done < len(ids):
                sys.stderr.write(f"\n{label}: {done}/{len(ids)} completed by the deadline\n")
            return done
        time.sleep(0.05)


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


def open_location(location: str) -> Any:
    """The store at ``location`` for reading: LMDB read-only (no write transaction is ever
    begun on it), or a PostgreSQL schema (opening one writes once: do it before any fault)."""
    from weft_actors.store import open_store

    return open_store(location, readonly=True)


def analyse(location: str, log_dir: str, ids: list[str], affected: list[str], victim_pids: set[int], t_event: float, wake_at: float, t_cont: float | None) -> dict[str, Any]:
    from weft_actors.codec import decode

    store = open_location(location)
    executions = read_exec_log(log_dir)
    try:
        starts = collections.Counter(key for kind, key, *_ in executions if kind == "S")
        reexecutions = sum(n - 1 for n in starts.values() if n > 1)
        late_tokens: set[str] = set()
        late_starts = 0
        if t_cont is not None:
            late_tokens = {token for kind, _, pid, at, token in executions if kind == "E" and pid in victim_pids and at >= t_cont and token}
            late_starts = sum(1 for kind, _, pid, at, _ in executions if kind == "S" and pid in victim_pids and at >= t_cont)
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


@contextlib.contextmanager
def store_location(args: argparse.Namespace) -> Iterator[str]:
    """Where the run keeps its store: a fresh schema of ``--store`` (or of a throwaway server,
    ``--postgres``), else a fresh temporary LMDB directory; removed on the way out."""
    if args.postgres:
        sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "tests"))
        from _postgres import PostgresServer, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("--postgres: PostgreSQL is not installed (initdb, pg_ctl)")
        with PostgresServer(bindir) as server, scratch_schema(server.url) as location:
            yield location
    elif args.store:
        with scratch_schema(args.store) as location:
            yield location
    else:
        with scratch_dir(prefix="weft-takeover-data-") as path:
            yield path


@dataclass
class Fleet:
    """The supervisors of a run, the store they share, and (once chosen) the victim."""

    supervisors: list[Supervisor]
    location: str
    victim_index: int = 0
    victim_pids: list[int] = field(default_factory=list)
    """Shard pids of the victim: one shard (one supervisor), or every shard of the victim host."""
    victim_supervisor_pid: int | None = None
    stopped: bool = False

    @property
    def hosts(self) -> bool:
        return len(self.supervisors) > 1

    @property
    def victim(self) -> Supervisor:
        return self.supervisors[self.victim_index]

    @property
    def survivors(self) -> list[Supervisor]:
        return [sup for i, sup in enumerate(self.supervisors) if not (self.hosts and i == self.victim_index)]

    def endpoints(self) -> list[str]:
        return [sup.endpoint for sup in self.supervisors]

    def signal_victim(self, signum: int) -> None:
        """A whole host (its process group) with several supervisors, else the victim shard.
        A stalled shard may be gone by the SIGCONT: its supervisor kills a shard that has not
        heartbeated for a ttl as hung (then there is nothing left to thaw)."""
        try:
            if self.hosts:
                assert self.victim.process is not None
                os.killpg(self.victim.process.pid, signum)
            else:
                os.kill(self.victim_pids[0], signum)
        except ProcessLookupError:
            if signum != signal.SIGCONT:
                raise

    def cpu(self) -> dict[int, float]:
        found: dict[int, float] = {}
        for sup in self.supervisors:
            found.update(sup.cpu())
        return found


def choose_victim(fleet: Fleet, owner_of: dict[str, str | None], stats: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """Pick the shard (one supervisor) or the host (several) owning the most workflows; returns
    the workflows it owns and the survivors' shard pids."""
    host_of: dict[str, int] = {}
    pid_of: dict[str, int] = {}
    for index, (sup, answer) in enumerate(zip(fleet.supervisors, stats)):
        sup.note_pids(answer)
        for shard in answer["shards"]:
            if shard.get("engine_id"):
                host_of[shard["engine_id"]] = index
                pid_of[shard["engine_id"]] = int(shard["pid"])
    counts = collections.Counter(owner for owner in owner_of.values() if owner is not None)
    if not counts:
        raise RuntimeError("no workflow has an owner")
    if fleet.hosts:
        by_host = collections.Counter({index: sum(n for engine, n in counts.items() if host_of.get(engine) == index) for index in range(len(fleet.supervisors))})
        fleet.victim_index = by_host.most_common(1)[0][0]
        fleet.victim_supervisor_pid = fleet.victim.process.pid if fleet.victim.process is not None else None
        victim_engines = {engine for engine, index in host_of.items() if index == fleet.victim_index}
    else:
        victim_engines = {counts.most_common(1)[0][0]}
    fleet.victim_pids = sorted(pid_of[engine] for engine in victim_engines)
    affected = [wid for wid, owner in owner_of.items() if owner in victim_engines]
    survivors = sorted(pid for engine, pid in pid_of.items() if engine not in victim_engines)
    return affected, survivors


def survivors_after(fleet: Fleet) -> dict[str, Any]:
    """Per live shard of the survivors: takeovers and longest reclaim pass (their ``stats()``,
    which shards push once a second)."""
    from weft_actors import Client

    found: dict[str, Any] = {}
    for sup in fleet.survivors:
        with Client(sup.endpoint, timeout=10) as client:
            after = client.stats()
        sup.note_pids(after)  # a restarted shard
        for shard in after["shards"]:
            if shard.get("pid") and shard.get("engine_id") and int(shard["pid"]) not in fleet.victim_pids:
                found[str(shard["pid"])] = {
                    "takeovers": shard.get("claims_takeover"),
                    "reclaim_pass_max_ms": round(1000 * shard.get("reclaim_pass_seconds", {}).get("max", 0.0), 1),
                }
    return found


def victim_outcome(fleet: Fleet, t_event: float) -> tuple[str | None, float | None]:
    """How the victim ended: one shard's exit code and reap time from its supervisor's log;
    a killed host's own exit code; a thawed host's shards' codes (comma-separated)."""
    if not fleet.hosts:
        code, reaped_at = victim_exit(fleet.victim.log_tail(5000), fleet.victim_pids[0])
        return code, None if reaped_at is None else round((reaped_at - t_event) * 1000, 1)
    process = fleet.victim.process
    if process is not None and process.returncode is not None and process.returncode < 0:
        return str(process.returncode), None
    codes = [victim_exit(fleet.victim.log_tail(5000), pid)[0] for pid in fleet.victim_pids]
    return ",".join(str(code) for code in codes), None


def measure(args: argparse.Namespace, fleet: Fleet, log_dir: str) -> dict[str, Any]:
    """Start and park the workflows, strike at T, watch them finish; then stop the fleet and
    read the store. Returns the raw facts ``run`` reports."""
    import uvloop

    per_thousand = 4.0 if args.store or args.postgres else 1.5  # starts are slower on PostgreSQL
    lead = args.lead if args.lead is not None else 3.0 + per_thousand * args.workflows / 1000
    wake_at = time.time() + lead
    ids = uvloop.run(start_all(fleet.endpoints(), args.workflows, wake_at, args.pause, 200))
    wait_parked(log_dir, args.workflows, wake_at - 1.0)
    owner_of, stats = uvloop.run(owners(fleet.endpoints(), ids))
    affected, survivors = choose_victim(fleet, owner_of, stats)
    store = open_location(fleet.location)
    try:
        if time.time() > wake_at - 0.05:
            raise RuntimeError("the wake time passed before the kill: raise --lead")
        cpu_before = fleet.cpu()
        client_before = time.process_time()
        busy_before = system_busy_seconds()
        database_before = postgres_cpu_seconds(fleet.location if fleet.location.startswith("postgres") else None)
        time.sleep(max(0.0, wake_at - 0.005 - time.time()))
        t_event = time.time()
        fleet.signal_victim(signal.SIGKILL if args.mode == "kill" else signal.SIGSTOP)
        fleet.stopped = args.mode == "stall"
        done = wait_completed(store, ids, args.timeout, "finished after the " + args.mode)
        all_done_s = time.time() - t_event
        busy = system_busy_seconds() - busy_before
        client_cpu = time.process_time() - client_before
        database_cpu = postgres_cpu_seconds(fleet.location if fleet.location.startswith("postgres") else None) - database_before
        time.sleep(1.1)  # shards push their stats to the supervisor once a second
        shards_after = survivors_after(fleet)
        cpu_after = fleet.cpu()
        # CPU the rest of the machine took meanwhile (a disturbed run shows here); a killed
        # victim's CPU after T is unknown and counted as ours: 0. The database's is its own.
        ours = client_cpu + database_cpu + sum(cpu_after[pid] - cpu_before.get(pid, 0.0) for pid in cpu_after if cpu_after[pid] > 0)
        other_cpu = max(0.0, busy - ours)
        t_cont = None
        if fleet.stopped:
            t_cont = time.time()
            fleet.signal_victim(signal.SIGCONT)
            fleet.stopped = False
            time.sleep(args.after_cont)
    finally:
        store.close()
    for sup in fleet.supervisors:
        sup.terminate(30)
    time.sleep(0.2)  # let the log reader threads take the last lines
    victim_code, reaped_ms = victim_outcome(fleet, t_event)
    found = analyse(fleet.location, log_dir, ids, affected, set(fleet.victim_pids), t_event, wake_at, t_cont)
    return {
        "affected": affected, "survivors": survivors, "done": done, "all_done_s": all_done_s, "other_cpu": other_cpu,
        "database_cpu": database_cpu, "shards_after": shards_after, "victim_code": victim_code, "reaped_ms": reaped_ms, "found": found,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    work_dir = tempfile.mkdtemp(prefix="weft-takeover-")
    log_dir = os.path.join(work_dir, "log")
    os.makedirs(log_dir)
    env = {"WEFT_BENCH_LOG": log_dir}
    timing = ("--heartbeat", str(args.heartbeat), "--ttl", str(args.ttl))
    try:
        with store_location(args) as location, contextlib.ExitStack() as stack:
            # ``--store`` after the harness's own ``--data``: the later one wins.
            supervisors = [
                Supervisor(shards=args.shards, args=(*timing, "--store", location), env=env, log_level=args.log_level) for _ in range(args.supervisors)
            ]
            for sup in supervisors:
                stack.enter_context(sup)
            fleet = Fleet(supervisors, location)
            try:
                facts = measure(args, fleet, log_dir)
            except BaseException:
                for index, sup in enumerate(supervisors):  # what the supervisors said, for the failure's cause
                    sys.stderr.write(f"\n--- supervisor {index} (pid {sup.process.pid if sup.process else '?'}) log tail ---\n{sup.log_tail(200)}")
                raise
            finally:
                if fleet.stopped:
                    fleet.signal_victim(signal.SIGCONT)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return summarise(args, fleet, facts)


def summarise(args: argparse.Namespace, fleet: Fleet, facts: dict[str, Any]) -> dict[str, Any]:
    """The JSON line: the single-supervisor keys as before, the fleet's after them."""
    found = facts["found"]
    latencies = found.pop("latencies")
    target_ms = round((args.ttl + 2 * args.heartbeat + 1.0) * 1000, 1)
    result = {
        "mode": args.mode,
        "workflows": args.workflows,
        "shards": args.shards,
        "affected": len(facts["affected"]),
        "p50_ms": round(percentile(latencies, 0.50), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1) if latencies else 0.0,
        "lost": found.pop("lost"),
        "duplicate_commits": found.pop("duplicate_commits"),
        "activity_reexecutions": found.pop("activity_reexecutions"),
        "zombie_commits": found.pop("zombie_commits"),
        "completed_by_deadline": facts["done"],
        "all_done_s": round(facts["all_done_s"], 3),
        "other_cpu_s": round(facts["other_cpu"], 2),
        "heartbeat": args.heartbeat,
        "ttl": args.ttl,
        "victim_pid": fleet.victim_supervisor_pid if fleet.hosts else fleet.victim_pids[0],
        "survivor_pids": facts["survivors"],
        "victim_exit_code": facts["victim_code"],
        "victim_reaped_ms": facts["reaped_ms"],
        "shards_after": facts["shards_after"],
        **found,
    }
    if args.mode == "stall":
        result["stall_bound_ms"] = round((args.ttl + 2 * args.heartbeat + 0.5) * 1000, 1)
    result["target_p99_ms"] = target_ms
    result["meets_target"] = bool(
        latencies and result["p99_ms"] <= target_ms and result["lost"] == 0 and result["duplicate_commits"] == 0 and result["zombie_commits"] == 0
    )
    if fleet.hosts or args.store or args.postgres:
        result["supervisors"] = args.supervisors
        result["store"] = "postgresql" if fleet.location.startswith("postgres") else "lmdb"
        result["victim_shard_pids"] = fleet.victim_pids
        result["database_cpu_s"] = round(facts["database_cpu"], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=5000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--mode", choices=("kill", "stall"), default="kill")
    parser.add_argument("--pause", type=float, default=0.2, help="each short sleep of the workflow (s)")
    parser.add_argument("--lead", type=float, default=None, help="seconds from the first start to the wake time (default 3 + 1.5 per 1000 workflows, 4 on PostgreSQL)")
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=120.0, help="deadline for every workflow to finish after T (s)")
    parser.add_argument("--after-cont", type=float, default=3.0, help="stall: seconds to watch after SIGCONT")
    parser.add_argument("--store", metavar="URL", help="a PostgreSQL URL: the run's store is a fresh schema there (default: a temporary LMDB directory)")
    parser.add_argument("--postgres", action="store_true", help="start a throwaway PostgreSQL server for the run and use it as --store")
    parser.add_argument("--log-level", default="WARNING", help="the supervisors' (their log tails go to stderr if the run fails)")
    parser.add_argument("--supervisors", type=int, default=1, metavar="N", help="supervisors (hosts) on the one store; with 2 or more the victim is a whole supervisor's process group")
    args = parser.parse_args()
    if args.supervisors < 1:
        parser.error("--supervisors must be 1 or more")
    if args.supervisors == 1 and args.shards < 2:
        parser.error("a takeover needs --shards 2 or more (or --supervisors 2)")
    if args.store and args.postgres:
        parser.error("--store and --postgres exclude each other")
    with sigterm_as_exit():
        result = run(args)
    report(result, f"takeover ({args.mode})")


if __name__ == "__main__":
    main()
