"""Fenced ownership across real engine processes on one data directory: duplicate starts,
recovery after kill -9 (with a confirmed death, and by expiry alone), a SIGSTOPped engine
that wakes up deposed, and signals through a non-owner with no hints at all.

Child engines run ``ownership_app.py``; the engine in this process, when there is one, runs
the same workflows. Every child is reaped, whatever happens.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from _processes import wait_until
from _support import eventually, run
from weft_actors import Engine
from weft_actors.codec import decode
from weft_actors.store import LmdbStore

pytestmark = pytest.mark.timeout(30)

HERE = Path(__file__).parent
APP_PATH = HERE / "ownership_app.py"


def _load_app() -> Any:
    spec = importlib.util.spec_from_file_location("ownership_app", APP_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


APP = _load_app()


@pytest.fixture(autouse=True)
def _activity_log_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Activities run by an engine in this process log where the children's do."""
    monkeypatch.setattr(APP, "ACTIVITY_LOG", str(tmp_path / "activity.log"))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Child:
    """One child engine process; commands on its stdin, events in a JSON-lines file."""

    def __init__(self, tmp_path: Path, name: str, flags: tuple[str, ...]) -> None:
        self.name = name
        self.events = tmp_path / f"{name}.events"
        env = {**os.environ, "WEFT_OWNERSHIP_LOG": str(tmp_path / "activity.log")}
        self.proc = subprocess.Popen(
            [sys.executable, str(APP_PATH), str(tmp_path / "data"), str(self.events), *flags],
            stdin=subprocess.PIPE,
            env=env,
            text=True,
        )
        ready = self.wait_for(lambda e: e["event"] == "ready", 20, "ready")
        self.engine_id: str = ready["engine_id"]

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10, what: str = "event") -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            if self.proc.poll() is not None and self.proc.returncode not in (0, 3):
                raise AssertionError(f"child {self.name} exited with {self.proc.returncode}")
            return next((e for e in read_jsonl(self.events) if predicate(e)), None)

        return wait_until(found, timeout, f"{what} from child {self.name}")

    def count(self, event: str) -> int:
        return sum(1 for e in read_jsonl(self.events) if e["event"] == event)

    def report(self) -> list[str]:
        seen = self.count("report")
        self.send(cmd="report")
        wait_until(lambda: self.count("report") > seen, 10, f"report from {self.name}")
        return [e for e in read_jsonl(self.events) if e["event"] == "report"][-1]["actors"]

    def reap(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    started: list[Child] = []

    def make(name: str, *flags: str) -> Child:
        child = Child(tmp_path, name, flags)
        started.append(child)
        return child

    try:
        yield make
    finally:
        for child in started:
            child.reap()


def activities(tmp_path: Path) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "activity.log")


def completed(store: LmdbStore, ids: list[str]) -> bool:
    return all((store.get_workflow(wid) or {}).get("status") == "completed" for wid in ids)


def stop_outside_a_commit(proc: subprocess.Popen, store: LmdbStore) -> None:
    """SIGSTOP ``proc`` at a moment it does not hold the LMDB write lock (a process stopped
    inside a commit would stall every writer, which is not what these tests are about)."""
    for _ in range(50):
        proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] == "T", 5, "stop")
        got = threading.Event()

        def try_write() -> None:
            txn = store.env.begin(write=True)
            txn.abort()
            got.set()

        threading.Thread(target=try_write, daemon=True).start()
        if got.wait(0.5):
            return
        proc.send_signal(signal.SIGCONT)
        got.wait(5)
        time.sleep(0.02)
    raise AssertionError("could not stop the child outside a commit")


def local_engine(tmp_path: Path, **options: Any) -> Engine:
    return Engine(str(tmp_path / "data"), app=APP.APP, **options)


# -- the tests --------------------------------------------------------------------------------


def test_two_engine_processes_starting_the_same_id_exactly_one_wins_and_the_activity_runs_once(tmp_path, spawn):
    a, b = spawn("a"), spawn("b")
    at = time.time() + 0.3  # both start at the same moment
    for child in (a, b):
        child.send(cmd="start", workflow="one_slow", args=["dup", 0.0], ids=["dup"], at=at)
    outcomes = [child.wait_for(lambda e: e.get("id") == "dup") for child in (a, b)]
    assert sorted(o["event"] for o in outcomes) == ["start_error", "started"]
    assert [o["code"] for o in outcomes if o["event"] == "start_error"] == ["workflow_already_exists"]
    store = LmdbStore(str(tmp_path / "data"))
    try:
        wait_until(lambda: completed(store, ["dup"]), 10, "completion")
        assert store.get_epoch("dup") == 1
    finally:
        store.close()
    assert [e["tag"] for e in activities(tmp_path)] == ["dup"]


def test_engine_processes_recovering_parked_workflows_take_disjoint_sets_that_cover_all(tmp_path, spawn):
    ids = [f"p-{i}" for i in range(30)]
    a = spawn("a")
    a.send(cmd="start", workflow="parked", ids=ids)
    wait_until(lambda: a.count("started") == len(ids), 10, "starts")
    b, c = spawn("b"), spawn("c")
    assert b.report() == [] and c.report() == []  # a is alive: nothing to take

    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)

    store = LmdbStore(str(tmp_path / "data"))
    try:
        owners = {b.engine_id, c.engine_id}
        wait_until(lambda: all((store.get_holder(wid) or ("",))[0] in owners for wid in ids), 5, "takeover")
        took_b, took_c = set(b.report()), set(c.report())
        assert took_b and took_c
        assert took_b.isdisjoint(took_c)
        assert took_b | took_c == set(ids)
        for wid in ids:
            assert store.get_holder(wid)[0] == (b.engine_id if wid in took_b else c.engine_id)
            assert store.get_epoch(wid) == 2
    finally:
        store.close()


def test_kill_9_then_mark_engine_dead_another_process_completes_its_workflows_within_1s(tmp_path, spawn):
    ids = [f"k-{i}" for i in range(20)]
    a = spawn("a", "--hang", "--heartbeat", "0.5", "--ttl", "3", "--no-probe")
    a.send(cmd="start", workflow="one_slow", args=["k", 0.0], ids=ids)
    wait_until(lambda: len(activities(tmp_path)) == len(ids), 10, "activities in flight")

    async def main() -> float:
        async with local_engine(tmp_path, heartbeat=0.5, ttl=3.0, probe_peers=False) as b:
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(timeout=10)
            await eventually(lambda: True, 0.6)
            assert all(b.store.get_holder(wid)[0] == a.engine_id for wid in ids)  # not without the mark
            marked = time.monotonic()
            assert b.store.mark_engine_dead(a.engine_id)
            await eventually(lambda: completed(b.store, ids), 5)
            for wid in ids:
                assert await b.get_handle(wid).result(timeout=1) == os.getpid()
            return time.monotonic() - marked

    elapsed = run(main())
    assert elapsed < 1.0, f"took {elapsed:.3f}s after the mark"


def test_kill_9_without_a_mark_or_probe_is_taken_over_after_expiry(tmp_path, spawn):
    ids = [f"x-{i}" for i in range(10)]
    a = spawn("a", "--hang", "--no-probe")  # heartbeat 0.2, ttl 0.6
    a.send(cmd="start", workflow="one_slow", args=["x", 0.0], ids=ids)
    wait_until(lambda: len(activities(tmp_path)) == len(ids), 10, "activities in flight")

    async def main() -> tuple[float, float]:
        async with local_engine(tmp_path, heartbeat=0.2, ttl=0.6, probe_peers=False) as b:
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(timeout=10)
            record = b.store.engine(a.engine_id)
            # The record keeps lease-clock times; the activities' log keeps wall times.
            boundary = record["expires_at"] + 2 * record["heartbeat"] - b.store.clock.lease_now() + time.time()
            await eventually(lambda: completed(b.store, ids), 5)
            assert b.store.engine(a.engine_id)["state"] == "expired"  # taken over on expiry; no death confirmed
            return boundary, time.time()

    boundary, done = run(main())
    rerun = [e for e in activities(tmp_path) if e["pid"] == os.getpid()]
    assert len(rerun) == len(ids)
    assert min(e["at"] for e in rerun) > boundary  # never before the expiry boundary
    assert done - boundary < 1.0


def test_sigstopped_engine_is_taken_over_past_its_ttl_and_after_sigcont_commits_nothing_and_exits(tmp_path, spawn):
    ids = [f"z-{i}" for i in range(5)]
    a = spawn("a")  # heartbeat 0.2, ttl 0.6
    a.send(cmd="start", workflow="one_slow", args=["z", 1.0], ids=ids)
    wait_until(lambda: len(activities(tmp_path)) == len(ids), 10, "activities in flight")
    store = LmdbStore(str(tmp_path / "data"))
    kept = ("workflows", "ops", "inbox", "timers", "claim_epoch", "claim_holder", "by_engine", "visibility", "feed")

    def state() -> dict[str, Any]:
        with store.read() as txn:
            found = {name: dict(txn.cursor(db=getattr(store.dbs, name))) for name in kept}
            found["a"] = txn.get(bytes.fromhex(a.engine_id), db=store.dbs.engines)
        return found

    try:
        stop_outside_a_commit(a.proc, store)

        async def main() -> None:
            async with local_engine(tmp_path, heartbeat=0.2, ttl=0.6) as b:
                await eventually(lambda: completed(b.store, ids), 8)
                for wid in ids:
                    assert await b.get_handle(wid).result(timeout=1) == os.getpid()
                    assert b.store.get_epoch(wid) == 2
                assert a.proc.poll() is None  # still stopped, still holding its lock
                before = state()
                a.proc.send_signal(signal.SIGCONT)
                assert await _wait_exit(a.proc, 5) == 3
                assert a.count("deposed") == 1
                assert state() == before

        run(main())
    finally:
        a.proc.send_signal(signal.SIGCONT)
        store.close()


async def _wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    await eventually(lambda: proc.poll() is not None, timeout)
    return proc.returncode


def test_signal_via_a_non_owner_process_is_delivered_within_one_heartbeat_without_hints(tmp_path, spawn):
    ids = [f"s-{i}" for i in range(5)]
    owner = spawn("owner")  # heartbeat 0.2
    owner.send(cmd="start", workflow="parked", ids=ids)
    wait_until(lambda: owner.count("started") == len(ids), 10, "starts")

    async def main() -> list[float]:
        latencies = []
        async with local_engine(tmp_path, heartbeat=0.2, ttl=0.6) as sender:
            for wid in ids:
                sent = time.monotonic()
                await sender.signal(wid, "go", wid)
                await eventually(lambda: (sender.store.get_workflow(wid) or {})["status"] == "completed", 2, 0.002)
                latencies.append(time.monotonic() - sent)
                assert decode(sender.store.get_workflow(wid)["result"]) == wid
            assert sender.actors == {}  # delivered by the owner, not driven here
        return latencies

    latencies = run(main())
    assert max(latencies) < 0.2 + 0.1, latencies
