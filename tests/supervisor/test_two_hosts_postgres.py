"""Two hosts on one PostgreSQL: one dies or freezes mid-load, the other finishes everything once.

Two supervisors (separate process trees, separate front doors), 2 shards each, share one
schema of the session's throwaway server. A few hundred three-step workflows with durable
naps are being started through both front doors when host A's whole process group is
killed (``kill -9``) or frozen (``SIGSTOP``); a client whose host stops answering fails over
to the other. Every workflow, host A's included, must then complete on host B, with the
result its arguments determine, each op committed once and each committed activity outcome
the token of exactly one execution (``_two_hosts.judge``: the store's op logs against the
activities' own execution log). A frozen host thawed after the takeover must commit nothing:
every workflow keyspace is byte for byte what it was before ``SIGCONT``, its old engines'
leases are never renewed, and each of them ends deposed (its first transaction found it
expired) or killed as hung by its thawed supervisor. The invariant checker must find nothing
wrong, and host B must drain cleanly.

The freeze comes at whatever moment the load is at (often inside one of host A's write
transactions), and, in a third test, for certain inside one (a failpoint): the store's write
lock is then held by a stopped process, and the other host must not wait for it for ever.

What each test would notice: a workflow never completed (a deadline, or no progress for
``STALL_LIMIT``; the failure names the unfinished workflows with their holders, the engine
registry, who holds the store's write lock and whether each front door answers); an op
committed twice (the stored token differs from the consumed one, or the delivery ordinals
repeat); a thawed engine's commit (a snapshot change) or renewal; and a run where host A
owned nothing at the fault (``MIN_IN_FLIGHT``), which would prove nothing.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from typing import Any, Callable, Iterator

import pytest

import two_hosts_app as app
from _processes import RunningSupervisor, wait_until
from _two_hosts import (
    APP,
    TIMING,
    Load,
    Verdict,
    check_invariants,
    describe_unfinished,
    engines_of,
    front_door_report,
    judge,
    new_schema,
    plan,
    read_executions,
    snapshot,
    snapshot_changes,
    wait_finished,
    wait_gone,
    write_lock_report,
)
from weft_actors.store import open_store

log = logging.getLogger("two_hosts")

WORKFLOWS = 300
FAULT_AFTER = 140
"""Starts acknowledged before the fault: the rest are still to come, through the survivor."""
MIN_IN_FLIGHT = 10
"""Workflows host A must own at the fault (and B then finish) for the run to prove anything."""
TXN_FAILPOINT = "commit:after-apply:60:stop"
"""Host A's 60th batch (of the first of its shards to get there): well into the load."""
FAILPOINT_ENV, FAILPOINT_ONCE_ENV = "WEFT_FAILPOINT", "WEFT_FAILPOINT_ONCE"
COMPLETION_TIMEOUT = 150.0
STALL_LIMIT = 45.0
"""Seconds without a start acknowledged or a workflow completed that fail the test at once:
far beyond a takeover (ttl + 2 x heartbeat = 4 s, then the longest nap, 5 s, twice)."""


@contextlib.contextmanager
def two_hosts(
    postgres_url: str, tmp_path: Any, host_a_env: dict[str, str] | None = None
) -> Iterator[tuple[str, str, RunningSupervisor, RunningSupervisor, Any]]:
    """(store URL, execution log directory, host A, host B, a store to watch): one fresh schema,
    both supervisors reaped (their whole process groups) and the store closed on the way out."""
    url = new_schema(postgres_url)
    executions = tmp_path / "executions"
    executions.mkdir()
    env = {app.LOG_ENV: str(executions)}
    with (
        RunningSupervisor(url, shards=2, app=APP, args=TIMING, env={**env, **(host_a_env or {})}) as host_a,
        RunningSupervisor(url, shards=2, app=APP, args=TIMING, env=env) as host_b,
    ):
        store: Any = open_store(url)  # opened before any fault: opening one writes
        try:
            yield url, str(executions), host_a, host_b, store
        finally:
            store.close()


def held_by(store: Any, engines: dict[str, int]) -> dict[str, int]:
    """engine id -> how many workflows it holds right now, for each of ``engines``."""
    return {engine: len(store.held_by(engine)) for engine in engines}


def start_load_until_fault(load: Load, store: Any, host_a_engines: dict[str, int]) -> dict[str, int]:
    """Start the load and wait until ``FAULT_AFTER`` starts are acknowledged; returns what host
    A's engines hold then (read just before the fault)."""
    load.start()
    wait_until(lambda: load.acknowledged() >= FAULT_AFTER, timeout=90, what=f"{FAULT_AFTER} starts acknowledged", interval=0.01)
    return held_by(store, host_a_engines)


def assert_taken_from(store: Any, held: dict[str, int], states: tuple[str, ...]) -> None:
    """Each engine of host A that held workflows at the fault is marked so in the registry
    (``expired``: a peer acted on its lapsed lease; ``dead``: on its ended session)."""
    records = store.engines()
    found = {engine: records.get(engine, {}).get("state") for engine, count in held.items() if count}
    assert found and all(state in states for state in found.values()), f"host A's engines (holding {held} at the fault) are {found}, not {states}"


def pid_labels(*hosts: tuple[str, RunningSupervisor]) -> dict[int, str]:
    labels = {}
    for name, host in hosts:
        if host.process is not None:
            labels[host.process.pid] = f"host {name} supervisor"
        for slot, pid in enumerate(host.shard_pids):
            labels[pid] = f"host {name} shard {slot}"
    return labels


def finish_and_judge(load: Load, store: Any, url: str, specs: list[Any], executions_dir: str, host_a: RunningSupervisor, host_b: RunningSupervisor) -> Verdict:
    """Every start acknowledged and every workflow completed, else the test fails naming the
    unfinished workflows, the engine registry, the write lock's holder and both hosts' logs;
    then the exactly-once verdict."""
    why = wait_finished(load, store, len(specs), COMPLETION_TIMEOUT, STALL_LIMIT)
    if why is not None:
        report = [why, describe_unfinished(store, specs), write_lock_report(url, pid_labels(("A", host_a), ("B", host_b)))]
        report.append(front_door_report({"A": host_a, "B": host_b}))
        report += [f"host B log tail:\n{host_b.log_text()[-4000:]}", f"host A log tail:\n{host_a.log_text()[-2000:]}"]
        pytest.fail("\n".join(report))
    assert len(load.acked) == len(specs)
    assert load.failovers >= 1, "host A's client never had to fail over: the fault hit no start"
    return judge(store, specs, read_executions(executions_dir), set(host_a.shard_pids))


def assert_exactly_once(verdict: Verdict, held: dict[str, int]) -> None:
    in_flight_on_a = sum(held.values())
    log.info("verdict: %s; host A held %d at the fault", verdict.summary(), in_flight_on_a)
    assert verdict.problems == [], "\n".join(verdict.problems[:40])
    assert in_flight_on_a >= MIN_IN_FLIGHT, f"host A held only {in_flight_on_a} workflows at the fault"
    assert len(verdict.taken_over) >= MIN_IN_FLIGHT, f"only {len(verdict.taken_over)} workflows were begun on A and finished on B"


def stop_survivor_and_check(url: str, host_b: RunningSupervisor) -> None:
    """Host B never exited by itself, drains cleanly, and the store passes the checker."""
    assert host_b.process is not None and host_b.process.poll() is None, "host B's supervisor exited:\n" + host_b.log_text()[-3000:]
    assert host_b.terminate(60) == 0, host_b.log_text()[-3000:]
    problems = check_invariants(url)
    assert problems == [], "\n".join(problems[:40])


def never_renewed(before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
    """Whether an engine record, ``expired`` before SIGCONT, stayed ended: pruned, or still
    ``expired`` or ``dead`` (its thawed supervisor marks a shard it killed dead: a supervisor's
    write, not the engine's) with its lease exactly as it was, never renewed."""
    if after is None:
        return True
    return before is not None and after["state"] in ("expired", "dead") and all(
        after.get(field) == before.get(field) for field in ("expires_at", "incarnation", "cursor")
    )


def how_each_ended(log_text: str, engines: dict[str, int]) -> dict[str, str | None]:
    """engine id -> how its thawed shard ended, from its host's log: ``deposed`` (its own
    transaction found it expired), ``killed as hung`` (its supervisor, thawed too, saw no
    heartbeat for longer than the ttl), or None (neither: it must have committed, or lives)."""
    ended: dict[str, str | None] = {}
    for engine, pid in engines.items():
        if f"engine {engine} deposed" in log_text:
            ended[engine] = "deposed"
        elif f"(pid {pid}, engine {engine}) is hung" in log_text:
            ended[engine] = "killed as hung"
        else:
            ended[engine] = None
    return ended


@pytest.mark.timeout(400)
def test_kill_9_of_one_host_mid_load_every_workflow_completes_on_the_other_exactly_once(postgres_url, tmp_path):
    specs = plan(WORKFLOWS, seed=1)
    with two_hosts(postgres_url, tmp_path) as (url, executions, host_a, host_b, store):
        a_engines = engines_of(host_a)
        load = Load(specs, (host_a.endpoint, host_b.endpoint))
        try:
            held = start_load_until_fault(load, store, a_engines)
            host_a.signal_group(signal.SIGKILL)
            host_a.wait(10)
            wait_gone(a_engines.values(), 10, "host A's shards gone")
            log.info("host A killed with %d/%d acknowledged, holding %s", load.acknowledged(), WORKFLOWS, held)
            verdict = finish_and_judge(load, store, url, specs, executions, host_a, host_b)
        finally:
            load.stop()
        assert_taken_from(store, held, ("dead", "expired"))
        assert_exactly_once(verdict, held)
        stop_survivor_and_check(url, host_b)


def freeze_host_a_then_thaw(
    postgres_url: str, tmp_path: Any, seed: int, wait_for_fault: Callable[[Load, Any, dict[str, int]], dict[str, int]], host_a_env: dict[str, str] | None = None
) -> None:
    """The stall scenario: once ``wait_for_fault`` returns (what host A's engines hold then),
    SIGSTOP host A's whole process group; every workflow must complete on host B; then SIGCONT,
    and host A's thawed engines must end without changing any workflow keyspace or renewing a
    lease, and everything must still be exactly once."""
    specs = plan(WORKFLOWS, seed=seed)
    with two_hosts(postgres_url, tmp_path, host_a_env) as (url, executions, host_a, host_b, store):
        a_engines = engines_of(host_a)
        load = Load(specs, (host_a.endpoint, host_b.endpoint))
        frozen = False
        try:
            held = wait_for_fault(load, store, a_engines)
            host_a.signal_group(signal.SIGSTOP)
            frozen = True
            log.info("host A stopped with %d/%d acknowledged, holding %s", load.acknowledged(), WORKFLOWS, held)
            log.info("right after the freeze, %s", write_lock_report(url, pid_labels(("A", host_a), ("B", host_b))))
            verdict = finish_and_judge(load, store, url, specs, executions, host_a, host_b)
            assert_taken_from(store, held, ("expired",))
            engines_before = {engine: store.engines().get(engine) for engine in a_engines}
            before = snapshot(url)
            thawed_at = time.time()
            log_offset = len(host_a.log_text())
            host_a.signal_group(signal.SIGCONT)
            frozen = False
        finally:
            if frozen:
                host_a.signal_group(signal.SIGCONT)
            load.stop()
        wait_gone(a_engines.values(), 30, "host A's thawed shards exited")
        # Their last lines reach us through a reader thread on host A's stderr pipe, which may
        # lag their exit under load: read the log once they are in, or after a deadline.
        deadline = time.monotonic() + 10.0
        ended = how_each_ended(host_a.log_text()[log_offset:], a_engines)
        while None in ended.values() and time.monotonic() < deadline:
            time.sleep(0.1)
            ended = how_each_ended(host_a.log_text()[log_offset:], a_engines)
        log.info("host A's thawed engines ended: %s", ended)
        assert None not in ended.values(), (
            f"a thawed engine of host A neither was deposed nor killed as hung: {ended}; host A's log after the thaw:\n"
            + host_a.log_text()[log_offset:][-4000:]
        )
        time.sleep(1.0)  # two heartbeats of host A's restarted shards: nothing of theirs may change a workflow either
        changes = snapshot_changes(before, snapshot(url))
        assert changes == [], "host A committed after SIGCONT:\n" + "\n".join(changes[:40])
        engines_after = {engine: store.engines().get(engine) for engine in a_engines}
        renewed = {e: (engines_before[e], engines_after[e]) for e in a_engines if not never_renewed(engines_before[e], engines_after[e])}
        assert renewed == {}, f"host A's old engines renewed or revived after SIGCONT: {renewed}"
        late = [e for e in read_executions(executions) if e.pid in a_engines.values() and e.at >= thawed_at and e.kind == "S"]
        log.info("host A's thawed shards began %d activity executions after SIGCONT (none may be committed)", len(late))
        assert judge(store, specs, read_executions(executions), set(a_engines.values())).problems == []
        assert_exactly_once(verdict, held)
        stop_survivor_and_check(url, host_b)


@pytest.mark.timeout(400)
def test_sigstop_of_one_host_is_taken_over_and_after_sigcont_it_commits_nothing(postgres_url, tmp_path):
    """Host A freezes at whatever moment the load is at: often inside one of its write
    transactions (its shards commit most of the time under this load), sometimes between."""
    freeze_host_a_then_thaw(postgres_url, tmp_path, 2, start_load_until_fault)


@pytest.mark.timeout(400)
def test_sigstop_of_one_host_inside_its_write_transaction_is_taken_over_and_commits_nothing(postgres_url, tmp_path):
    """The same, with host A frozen for certain while one of its shards is inside a write
    transaction: that shard stops itself there (the ``after-apply`` failpoint: every intent
    applied, not yet committed, the store's write lock held), and the test freezes the rest
    of host A at once, so no supervisor of host A is left to kill it (as a paused VM)."""
    marker = tmp_path / "failpoint.pid"
    env = {FAILPOINT_ENV: TXN_FAILPOINT, FAILPOINT_ONCE_ENV: str(marker)}

    def when_a_shard_stopped_in_its_transaction(load: Load, store: Any, host_a_engines: dict[str, int]) -> dict[str, int]:
        load.start()
        wait_until(marker.exists, timeout=90, what="a shard of host A stopped inside its write transaction", interval=0.005)
        log.info("shard pid %s of host A stopped inside a write transaction", marker.read_text() or "?")
        return held_by(store, host_a_engines)

    freeze_host_a_then_thaw(postgres_url, tmp_path, 3, when_a_shard_stopped_in_its_transaction, host_a_env=env)
