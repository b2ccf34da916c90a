"""Two supervisors ("hosts") on one PostgreSQL schema: the load, the evidence and the verdict
of the two-hosts tests (``tests/supervisor/test_two_hosts_postgres.py``).

The verdict never trusts one record alone. A workflow counts as done exactly once when:

- its record is ``completed`` with the result its arguments determine (``two_hosts_app``);
- its op log holds exactly the five ops of one run, with distinct delivery ordinals;
- each activity op's stored outcome is the token the workflow consumed (returned in its
  result): a second commit of an op overwrites its key, and then the two differ;
- that token was produced by exactly one execution in the activities' own log, for that
  workflow, run and seq (so the committed outcome is one execution's, not a blend).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

import psycopg

import two_hosts_app as app
from _processes import RunningSupervisor, pid_alive, wait_until
from weft_actors import Client
from weft_actors.codec import decode
from weft_actors.errors import EngineDeposed, EngineStopped, Overloaded, ServerUnavailable

log = logging.getLogger("two_hosts")

APP = "two_hosts_app"
TIMING = ("--heartbeat", "0.5", "--ttl", "3")
"""The defaults, said out loud: a stalled host's lease lapses ttl + 2 x heartbeat = 4 s after its
last renewal."""
RETRYABLE = (ServerUnavailable, EngineDeposed, EngineStopped, Overloaded)
"""No answer, or the engine that took the request stopped under it: it may have landed."""
WORKFLOW_TABLES = (
    "workflows", "ops", "inbox", "timers", "claim_epoch", "claim_holder", "by_engine", "visibility", "requests", "expiring",
)
"""Every keyspace a workflow's progress writes; the registry (``engines``), ``feed`` and
``meta`` also change with live engines' heartbeats and polls, so they are not compared."""


# -- the store ------------------------------------------------------------------------------


def new_schema(server_url: str) -> str:
    """A fresh schema on the session's server, and the URL that makes it the search path."""
    schema = "two_hosts_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server_url}?options=-csearch_path%3D{schema}"


def snapshot(url: str) -> dict[str, dict[bytes, bytes]]:
    """Every key and value of the workflow keyspaces, read in one transaction."""
    found: dict[str, dict[bytes, bytes]] = {}
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for name in WORKFLOW_TABLES:
            found[name] = {bytes(k): bytes(v) for k, v in conn.execute(f"SELECT k, v FROM weft_{name}")}
    return found


def snapshot_changes(before: dict[str, dict[bytes, bytes]], after: dict[str, dict[bytes, bytes]]) -> list[str]:
    """Each key added, removed or rewritten between two snapshots, one line each."""
    changes = []
    for name in WORKFLOW_TABLES:
        old, new = before[name], after[name]
        for key in sorted(old.keys() | new.keys()):
            if key not in new:
                changes.append(f"{name}: {key!r} removed")
            elif key not in old:
                changes.append(f"{name}: {key!r} added")
            elif old[key] != new[key]:
                changes.append(f"{name}: {key!r} rewritten")
    return changes


def check_invariants(url: str) -> list[str]:
    """The invariant checker's problems on the store at ``url`` (``check_store`` opens a
    ``postgresql://`` URL as it opens a directory)."""
    from weft_actors.store import check_store

    return [str(problem) for problem in check_store(url, time.time())]


def engines_of(sup: RunningSupervisor) -> dict[str, int]:
    """engine id -> pid of each shard of ``sup``, from its front door."""
    with Client(sup.endpoint, timeout=10) as client:
        shards = client.stats()["shards"]
    return {shard["engine_id"]: int(shard["pid"]) for shard in shards if shard.get("engine_id")}


# -- the load -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One workflow to start: ``relay(n, nap, work)`` through host ``host`` (0 or 1)."""

    wid: str
    n: int
    nap: float
    work: float
    host: int

    def expected(self, tokens: list[str]) -> dict[str, Any]:
        return {"n": self.n, "tokens": tokens, "sum": app.expected_sum(self.n)}


def plan(count: int, seed: int) -> list[Spec]:
    """``count`` workflows alternating between the hosts. One in four naps 2-5 s between its
    steps (parked in durable timers across the fault); the rest nap 0.1-1 s. Each activity
    works 20-250 ms, so some are running when a host dies."""
    rng = random.Random(seed)
    specs = []
    for i in range(count):
        nap = rng.uniform(2.0, 5.0) if i % 4 == 0 else rng.uniform(0.1, 1.0)
        specs.append(Spec(f"relay-{seed}-{i}", i, round(nap, 3), round(rng.uniform(0.02, 0.25), 3), i % 2))
    return specs


class Load:
    """Starts every spec through its host's front door from one thread per host, paced so the
    starts last a few seconds. A thread whose host stops answering fails over, for good, to
    the other host, as a real client would; ``if_exists="return"`` makes a start that landed
    unanswered count once."""

    def __init__(self, specs: list[Spec], endpoints: tuple[str, str], *, pace: float = 0.01, timeout: float = 3.0, give_up: float = 90.0) -> None:
        self.specs = specs
        self.endpoints = endpoints
        self.pace = pace
        self.timeout = timeout
        self.give_up = give_up
        self.acked: dict[str, int] = {}
        """wid -> host whose front door acknowledged its start."""
        self.failovers = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(host,), name=f"load-host-{host}", daemon=True) for host in (0, 1)]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def acknowledged(self) -> int:
        with self._lock:
            return len(self.acked)

    def done(self) -> bool:
        return not any(thread.is_alive() for thread in self._threads)

    def stop(self) -> None:
        """Make the threads give up at their next retry (a failed test must not leave them
        knocking at reaped supervisors)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(2 * self.timeout + 1)

    def _run(self, host: int) -> None:
        clients = [Client(endpoint, timeout=self.timeout) for endpoint in self.endpoints]
        current = host
        try:
            for spec in (spec for spec in self.specs if spec.host == host):
                if self._stop.is_set():
                    return
                current = self._start_one(spec, clients, current)
                time.sleep(self.pace)
        except Exception as exc:  # never silent: ``wait_finished`` fails the test on ``errors``
            self.errors.append(f"{threading.current_thread().name}: {type(exc).__name__}: {exc}")
        finally:
            for client in clients:
                client.close()

    def _start_one(self, spec: Spec, clients: list[Client], current: int) -> int:
        """Start ``spec`` through host ``current``; on no answer, through the other host (and
        so on, back and forth). Returns the host that answered, used for the next start."""
        deadline = time.monotonic() + self.give_up
        while not self._stop.is_set():
            try:
                clients[current].start("relay", spec.n, spec.nap, spec.work, id=spec.wid, if_exists="return")
                with self._lock:
                    self.acked[spec.wid] = current
                return current
            except RETRYABLE as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"start of {spec.wid} unanswered by either host for {self.give_up}s: {exc}") from exc
                log.info("host %d did not answer the start of %s (%s): failing over", current, spec.wid, exc.code)
                with self._lock:
                    self.failovers += 1
                current = 1 - current
                time.sleep(0.05)
        return current


# -- completion -----------------------------------------------------------------------------


def completed_count(store: Any) -> int:
    return store.workflow_counts().get(("completed", "relay"), 0)


def wait_finished(load: Load, store: Any, count: int, timeout: float, stall_limit: float) -> str | None:
    """Until every start is acknowledged and ``count`` relays are completed (the store's own
    counts, read directly: no request can hang on a stopped host). None then; else why not:
    the deadline passed, or nothing progressed (no start acknowledged, no workflow completed)
    for ``stall_limit`` seconds: a wedged cluster fails in seconds, not at the deadline."""
    started = time.monotonic()
    last, progressed = (-1, -1), started
    while True:
        now = time.monotonic()
        progress = (load.acknowledged(), completed_count(store))
        if progress != last:
            last, progressed = progress, now
        if load.done() and progress[1] >= count:
            return None
        if load.done() and load.errors:
            return f"the load failed: {load.errors}"
        if now - started > timeout:
            return f"not finished within {timeout}s: {progress[0]} starts acknowledged, {progress[1]}/{count} completed"
        if now - progressed > stall_limit:
            return f"no progress for {stall_limit}s: {progress[0]} starts acknowledged, {progress[1]}/{count} completed"
        time.sleep(0.1)


def describe_unfinished(store: Any, specs: Iterable[Spec]) -> str:
    """Each workflow not completed (status, holder, claim epoch) and the engine registry: the
    reproduction of a lost workflow."""
    lines = []
    for spec in specs:
        record = store.get_workflow(spec.wid)
        if record is None or record["status"] != "completed":
            status = None if record is None else record["status"]
            lines.append(f"{spec.wid} (host {spec.host}): status={status} holder={store.get_holder(spec.wid)} epoch={store.get_epoch(spec.wid)}")
    engines = {engine: {k: record.get(k) for k in ("pid", "state", "expires_at", "ended")} for engine, record in store.engines().items()}
    return "\n".join(lines[:40] + [f"... {len(lines)} unfinished in all", f"engines: {engines}"])


def front_door_report(hosts: dict[str, RunningSupervisor], timeout: float = 5.0) -> str:
    """Whether each host's front door answers a ping: a supervisor whose front door stopped
    answering (while its shards go on) shows here, apart from a wedged store."""
    lines = []
    for name, host in hosts.items():
        with Client(host.endpoint, timeout=timeout) as client:
            try:
                lines.append(f"host {name} front door: {client.ping()}")
            except RETRYABLE as exc:
                lines.append(f"host {name} front door: no answer ({exc})")
    return "\n".join(lines)


def write_lock_report(url: str, labels: dict[int, str]) -> str:
    """Who holds the store's write lock (the transaction-scoped advisory lock every write
    transaction takes first, ``_pg._env``) and who waits for it, with each backend's client
    process (``labels`` names our pids, e.g. "host A shard 0") and that process's state
    (``T``: stopped). A writer frozen inside its transaction holds the lock until it resumes."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT hashtext(current_schema() || '/weft_actors/write')").fetchone()
        key = int(row[0]) if row else 0
        rows = conn.execute(
            "SELECT l.granted, a.pid, a.client_port, a.state, a.wait_event_type, a.wait_event,"
            " extract(epoch FROM now() - a.xact_start)::float8, left(a.query, 90)"
            " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = %s AND l.objid = %s"
            " ORDER BY l.granted DESC, a.xact_start",
            ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
        ).fetchall()
    if not rows:
        return "the store's write lock: free, nobody waits"
    lines = []
    for granted, backend, port, state, wait_type, wait_event, age, query in rows:
        pid = _client_pid(port) if port else None
        who = "a process that has exited" if pid is None else f"pid {pid} ({_label(pid, labels)}, process state {_process_state(pid)})"
        role = "HOLDS" if granted else "waits for"
        lines.append(f"backend {backend} of client {who} {role} the write lock; {state}/{wait_type}/{wait_event} in a transaction open {age or 0:.1f}s: {query}")
    return "the store's write lock:\n  " + "\n  ".join(lines)


def _client_pid(port: int) -> int | None:
    """The local process owning the TCP socket whose local port is ``port`` (/proc)."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as file:
                for line in list(file)[1:]:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inode = fields[9]
        except OSError:
            continue
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    return int(entry)
        except OSError:
            continue
    return None


def _stat_fields(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _process_state(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[0] if fields else "gone"


def _label(pid: int, labels: dict[int, str]) -> str:
    """``labels``' name for ``pid``, or for its parent (a shard restarted by a supervisor)."""
    if pid in labels:
        return labels[pid]
    fields = _stat_fields(pid)
    parent = int(fields[1]) if len(fields) > 1 else 0
    return f"a child of {labels[parent]}" if parent in labels else "not ours"


def wait_gone(pids: Iterable[int], timeout: float, what: str) -> None:
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), timeout=timeout, what=what, interval=0.05)


# -- the execution log ----------------------------------------------------------------------


@dataclass(frozen=True)
class Execution:
    """One line of the activities' log: ``S`` when an execution began, ``E`` when it returned."""

    kind: str
    wid: str
    run_id: str
    seq: int
    attempt: int
    pid: int
    at: float
    token: str | None


def read_executions(directory: str) -> list[Execution]:
    found = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as file:
            for line in file:
                parts = line.rstrip("\n").split("\t")
                if not line.endswith("\n") or len(parts) < 7:
                    continue  # the last line of a process killed mid-write
                token = parts[7] if len(parts) > 7 else None
                found.append(Execution(parts[0], parts[1], parts[2], int(parts[3]), int(parts[4]), int(parts[5]), float(parts[6]), token))
    return found


# -- the verdict ----------------------------------------------------------------------------


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    taken_over: list[str] = field(default_factory=list)
    """Workflows an engine of host A committed ops of, and an engine of host B finished."""
    reexecuted: int = 0
    """Activity ops executed more than once (allowed: activities run at least once)."""

    def summary(self) -> str:
        return f"problems={len(self.problems)} taken_over={len(self.taken_over)} reexecuted={self.reexecuted}"


def judge(store: Any, specs: list[Spec], executions: list[Execution], host_a_pids: set[int]) -> Verdict:
    """Every spec completed once, with its right result, each outcome one execution's."""
    verdict = Verdict()
    ended_by_token: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        if execution.kind == "E" and execution.token:
            ended_by_token[execution.token].append(execution)
    started = Counter((e.wid, e.run_id, e.seq) for e in executions if e.kind == "S")
    verdict.reexecuted = sum(1 for n in started.values() if n > 1)
    for spec in specs:
        pids = _judge_one(store, spec, ended_by_token, verdict.problems)
        if pids and pids[0] in host_a_pids and pids[-1] not in host_a_pids:
            verdict.taken_over.append(spec.wid)
    return verdict


def _judge_one(store: Any, spec: Spec, ended_by_token: dict[str, list[Execution]], problems: list[str]) -> list[int]:
    """Adds ``spec``'s problems; returns the pids that executed its committed outcomes."""
    record = store.get_workflow(spec.wid)
    if record is None or record["status"] != "completed":
        problems.append(f"{spec.wid}: lost (status {None if record is None else record['status']})")
        return []
    result = decode(record["result"])
    tokens = result.get("tokens") if isinstance(result, dict) else None
    if not isinstance(tokens, list) or len(tokens) != app.STEPS or result != spec.expected(tokens):
        problems.append(f"{spec.wid}: wrong result {result!r}")
        return []
    ops = store.load_ops(spec.wid, record["run_id"])
    if sorted(ops) != list(range(app.OPS_PER_RUN)):
        problems.append(f"{spec.wid}: op log holds seqs {sorted(ops)}, not the {app.OPS_PER_RUN} ops of one run")
    ordinals = [op.get("t") for op in ops.values()]
    if len(set(ordinals)) != len(ordinals):
        problems.append(f"{spec.wid}: delivery ordinals {ordinals} repeat: an outcome delivered twice")
    pids = []
    for seq, consumed in zip(app.ACTIVITY_SEQS, tokens):
        op = ops.get(seq) or {}
        outcome: Any = decode(op["ok"]) if op.get("ok") is not None else None
        stored = outcome[0] if isinstance(outcome, list) and outcome else None
        if stored != consumed:
            problems.append(f"{spec.wid} seq {seq}: stored outcome {stored!r} but the workflow consumed {consumed!r}: committed twice")
        ends = ended_by_token.get(consumed, [])
        if len(ends) != 1 or (ends[0].wid, ends[0].run_id, ends[0].seq) != (spec.wid, record["run_id"], seq):
            problems.append(f"{spec.wid} seq {seq}: token {consumed!r} comes from {ends!r}, not from one execution of this op")
            continue
        pids.append(ends[0].pid)
    return pids
