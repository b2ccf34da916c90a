"""The chaos harness: continuous client load against a real supervisor while shards are killed
(``kill -9``), stalled (``SIGSTOP`` past their lease, then ``SIGCONT``: they must depose
themselves), hung (``SIGSTOP`` for good, or stopped holding the write lock: the supervisor must
kill and replace them), made to take over a large backlog, and the whole supervisor is crashed
or drained and restarted; poison workflows (blocking the loop) must end up quarantined, and
workflows raising ``SystemExit`` fail alone. Then every workflow must end with exactly the
result its acknowledged inputs determine, the supervisor must never have exited by itself,
and the invariant checker must find nothing wrong.

Randomness is seeded: the seed decides every choice of the load and of the faults (thread
timing still varies from run to run). Run it from pytest (``tests/chaos/test_chaos.py``) or
directly for longer runs::

    python tests/chaos/chaos_harness.py --seconds 300 [--seed N] [--runs K] [--shards 3]
    sudo python tests/chaos/chaos_harness.py --seconds 600 --store-faults --clock-faults
    python tests/chaos/chaos_harness.py --seconds 600 --postgres   # chaos_postgres: the database's faults

Clients tolerate faults the way a real client must: a request without an answer
(``ServerUnavailable``, or an engine that stopped under it) may or may not have been applied,
so it is sent again. Starts use client-chosen ids with ``if_exists="return"``; updates carry a
request id (applied at most once by the engine); signals carry a unique token that the
workflow counts once. Exactly-once consumption of each inbox message is then checked by the
invariant checker, not assumed.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
for _path in (str(HERE), str(TESTS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import chaos_app  # noqa: E402
from chaos_faults import HEARTBEAT, TTL, FaultsMixin  # noqa: E402
from chaos_isolation import LOCK_FAILPOINT, IsolationMixin  # noqa: E402
from chaos_summary import Acc, GaveUp, Summary  # noqa: E402
from chaos_faults_store import StoreFaults  # noqa: E402
from chaos_faults_clock import ClockFaults  # noqa: E402
from chaos_postgres import PgChaosStore  # noqa: E402
from chaos_quarantine import QuarantineWatchMixin  # noqa: E402
from _processes import RunningSupervisor  # noqa: E402
from weft_actors import Client  # noqa: E402
from weft_actors.errors import EngineDeposed, EngineStopped, ServerUnavailable, StorageError, StorageFull, WeftError, WorkflowClosed  # noqa: E402

RETRYABLE = (ServerUnavailable, EngineDeposed, EngineStopped, StorageFull)  # full: refused, not applied
"""No answer, or the engine that took the request stopped under it: it may have been applied.
With ``--postgres``, a ``StorageError`` too: the database refused or could not be reached."""

OPS = ("acc", "signal", "update", "close", "query", "parent", "counter", "racer", "cancel", "terminate", "exit", "nap", "limited")
WEIGHTS = (12, 34, 14, 7, 4, 11, 9, 9, 3, 3, 1, 2, 4)
MAX_OPEN = 6
"""Accumulators one worker keeps open at once (each closes after a random number of adds)."""


# -- the run ------------------------------------------------------------------------------------


class ChaosRun(FaultsMixin, IsolationMixin, QuarantineWatchMixin):
    def __init__(
        self,
        data_dir: Path,
        seed: int,
        seconds: float,
        *,
        shards: int = 3,
        workers: int = 4,
        fault_gap: tuple[float, float] = (0.7, 2.0),
        request_timeout: float = 3.0,
        routing: str | None = None,
        app: str = "chaos_app",
        log: Callable[[str], None] = print,
        store_faults: bool = False,
        clock_faults: bool = False,
        postgres: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.store_faults: Any = PgChaosStore() if postgres else StoreFaults(data_dir) if store_faults else None
        self.location = self.store_faults.url if postgres else str(data_dir)  # the supervisor's; the harness reads read_location
        self.read_location = self.store_faults.direct_url if postgres else str(data_dir)
        self.retryable = RETRYABLE + ((StorageError,) if postgres else ())
        self.clock_faults = ClockFaults() if clock_faults else None
        self.seed = seed
        self.seconds = seconds
        self.shards = shards
        self.workers = workers
        self.fault_gap = fault_gap
        self.request_timeout = request_timeout
        self.log = log
        # Odd seeds send requests to any shard: every path through a non-owner gets chaos too.
        self.routing = routing or ("round-robin" if seed % 2 else "owner")
        self.summary = Summary(seed=seed, seconds=seconds)
        self.lock = threading.Lock()
        self.sup_lock = threading.Lock()
        """Held while the harness stops or restarts the supervisor (any other exit is a violation)."""
        self.exclusive = threading.Lock()
        self.forced_done = threading.Event()
        """Set once the fault thread has had its forced early faults: poisons wait for it."""
        """Held by a poison cycle, a lock stall or a large takeover: one of them at a time."""
        self.stop_load = threading.Event()
        self.stop_faults = threading.Event()
        self.hard_deadline = 0.0
        self.expected: dict[str, tuple[str, Any]] = {}
        """wid -> (kind, expected result) of every workflow a client started."""
        self.open_accs: list[Acc] = []
        self.seen_shards: set[int] = set()
        # Disarmed while it exists: the lock-stall fault removes it, and the shard that stops
        # at the failpoint creates it again (its pid inside).
        self.lock_marker = data_dir.parent / "lock-stall.pid"
        self.lock_marker.parent.mkdir(parents=True, exist_ok=True)
        self.lock_marker.write_text("")
        self.sup = RunningSupervisor(
            self.location,
            shards=shards,
            app=app,
            args=(
                "--heartbeat", str(HEARTBEAT), "--ttl", str(TTL), "--log-level", os.environ.get("WEFT_CHAOS_LOG_LEVEL", "WARNING"),
                "--restart-limit", "100000", "--restart-window", "30", "--routing", self.routing,
                "--stall-threshold", "0.3",  # below the ttl: a stalled shard's note names its culprit
            ),
            env={
                "PYTHONPATH": os.pathsep.join([str(HERE), str(TESTS), os.environ.get("PYTHONPATH", "")]),
                "WEFT_FAILPOINT": LOCK_FAILPOINT,
                "WEFT_FAILPOINT_ONCE": str(self.lock_marker),
            },
        )

    # -- bookkeeping ------------------------------------------------------------------------

    def violation(self, text: str) -> None:
        with self.lock:
            self.summary.violations.append(text)
        self.log(f"VIOLATION: {text}")

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self.summary, name, getattr(self.summary, name) + n)

    def call(self, what: str, fn: Callable[[], Any], tolerate: tuple[type[BaseException], ...] = ()) -> Any:
        """``fn()`` until it answers; a retryable failure may have been applied, so the caller
        makes every call safe to repeat. Errors in ``tolerate`` are returned, not raised."""
        delay = 0.05
        while True:
            try:
                return fn()
            except tolerate as exc:
                return exc
            except self.retryable as exc:
                with self.lock:
                    self.summary.retries += 1
                    self.summary.errors[exc.code] += 1
                if time.monotonic() > self.hard_deadline:
                    raise GaveUp(f"{what}: still failing at the hard deadline: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    # -- the whole run -----------------------------------------------------------------------

    def run(self) -> Summary:
        started = time.monotonic()
        self.log(f"chaos run: seed={self.seed} seconds={self.seconds:g} shards={self.shards} routing={self.routing} data={self.data_dir} (replay: WEFT_CHAOS_SEED={self.seed})")
        self.hard_deadline = started + self.seconds + 240
        try:
            self.sup.start()
            self._track_shards()
            self._chaos_phase()
            self._stop_and_check("after chaos")
            self.sup.start()
            self._finish_phase()
            self._stop_and_check("at the end")
        except GaveUp as exc:
            self.violation(str(exc))
        finally:
            self._kill_everything()
            self._scan_exits()
            if self.summary.violations or os.environ.get("WEFT_CHAOS_KEEP"):
                self._keep_evidence()
            if self.store_faults is not None:
                self.store_faults.close()
            if self.clock_faults is not None:
                self.clock_faults.close()
            self.summary.elapsed = time.monotonic() - started
        self.log(self.summary.line())
        return self.summary

    def _keep_evidence(self) -> None:
        """Beside the data directory: the supervisor's whole log, and (when the data directory
        is a loop mount that ``close`` removes) a copy of the store."""
        import shutil

        (self.data_dir.parent / "supervisor.log").write_text("".join(self.sup.stderr_lines))
        keep = getattr(self.store_faults, "keep_evidence", None)  # chaos_postgres: the server's log
        if keep is not None:
            keep(self.data_dir.parent)
        elif self.store_faults is not None and self.store_faults.available:
            shutil.copytree(self.data_dir, self.data_dir.parent / "data-copy", ignore=shutil.ignore_patterns("ballast"))
        self.log(f"evidence kept in {self.data_dir.parent}")

    def _chaos_phase(self) -> None:
        deadline = time.monotonic() + self.seconds
        threads = [threading.Thread(target=self._guard(self._worker, i), name=f"chaos-worker-{i}", daemon=True) for i in range(self.workers)]
        faults = [
            threading.Thread(target=self._guard(self._faults), name="chaos-faults", daemon=True),
            threading.Thread(target=self._guard(self._poison), name="chaos-poison", daemon=True),
        ]
        threads += faults
        threads.append(threading.Thread(target=self._guard(self._epochs), name="chaos-epochs", daemon=True))
        threads.append(threading.Thread(target=self._guard(self._watch_supervisor), name="chaos-supervisor", daemon=True))
        threads.append(threading.Thread(target=self._guard(self._watch_quarantine), name="chaos-quarantine", daemon=True))
        for thread in threads:
            thread.start()
        while time.monotonic() < deadline and not self.stop_load.is_set():
            time.sleep(0.1)
        self.stop_faults.set()
        for thread in faults:  # each ends its fault (a stall gets its SIGCONT, a poison its end)
            thread.join(120)
        self.stop_load.set()
        for thread in threads:
            thread.join(self.hard_deadline - time.monotonic())
            if thread.is_alive():
                self.violation(f"{thread.name} did not stop")

    def _guard(self, fn: Callable[..., None], *args: Any) -> Callable[[], None]:
        def run() -> None:
            try:
                fn(*args)
            except GaveUp as exc:
                self.violation(str(exc))
                self.stop_load.set()
            except Exception as exc:  # a harness bug or an unexpected error: never silent
                self.violation(f"{threading.current_thread().name} crashed: {type(exc).__name__}: {exc}")
                self.stop_load.set()

        return run

    # -- load -----------------------------------------------------------------------------------

    def _worker(self, index: int) -> None:
        rng = random.Random(f"{self.seed}-worker-{index}")
        accs: list[Acc] = []
        with Client(self.sup.endpoint, timeout=self.request_timeout) as client:
            k = 0
            while not self.stop_load.is_set():
                k += 1
                op = rng.choices(OPS, WEIGHTS)[0]
                wid = f"{op}-{self.seed}-{index}-{k}"
                if op == "acc" or (op in ("signal", "update", "close", "query") and not accs):
                    if len(accs) < MAX_OPEN:
                        accs.append(self._start_acc(client, rng, f"acc-{self.seed}-{index}-{k}"))
                elif op in ("signal", "update"):
                    acc = rng.choice(accs)
                    self._add(client, rng, acc, via=op)
                    if len(acc.values) >= acc.closes_after:
                        self._close(client, acc)
                        accs.remove(acc)
                elif op == "close":
                    acc = rng.choice(accs)
                    self._close(client, acc)
                    accs.remove(acc)
                elif op == "query":
                    acc = rng.choice(accs)
                    seen = self.call(f"query {acc.wid}", lambda: client.get_handle(acc.wid).query("count"))
                    self.count("queries")
                    if not 0 <= seen <= len(acc.values):
                        self.violation(f"{acc.wid}: query count {seen}, but only {len(acc.values)} adds were sent")
                elif op == "parent":
                    n = rng.randrange(1000)
                    self._start(client, "parent", wid, (n,), ("value", chaos_app.expected_parent(n)))
                    self.count("children", 2)
                elif op == "counter":
                    n = rng.randint(1, 4)
                    self._start(client, "counter", wid, (n, 0), ("value", chaos_app.expected_counter(n, 0)))
                    self.count("continued", n)
                elif op == "cancel":
                    # A racer never ends by itself: cancelled it must be, whatever the retries.
                    self._start(client, "racer", wid, (rng.randrange(1000),), ("error", "workflow_cancelled"))
                    self.call(f"cancel {wid}", lambda: client.get_handle(wid).cancel(), tolerate=(WorkflowClosed,))
                    self.count("cancels")
                elif op == "terminate":
                    # A parent and its children, terminated mid-flight (or found already done).
                    n = rng.randrange(1000)
                    self._start(client, "parent", wid, (n,), ("value", chaos_app.expected_parent(n)))
                    self.count("children", 2)
                    if rng.random() < 0.5:
                        time.sleep(rng.uniform(0, 0.02))
                    closed = self.call(f"terminate {wid}", lambda: client.get_handle(wid).terminate("chaos"), tolerate=(WorkflowClosed,))
                    status = getattr(closed, "status", "terminated")  # a retry of one that landed sees it closed
                    if status == "terminated":
                        with self.lock:
                            self.expected[wid] = ("error", "workflow_terminated")
                    self.count("terminates")
                elif op == "exit":
                    # sys.exit() or KeyboardInterrupt in workflow code: it fails, no shard stops.
                    how = rng.choice(("exit", "interrupt"))
                    self._start(client, "exits", wid, (how, rng.randrange(1000)), ("failed", "UserCodeExit"))
                    self.count("user_exits")
                elif op == "nap":
                    # A timer, checked against the wall clock it keeps (never early, jumps or not).
                    seconds = round(rng.uniform(0.2, 4.0), 3)
                    self._start(client, "napper", wid, (seconds,), ("nap", (seconds, time.monotonic())))
                    self.count("naps")
                elif op == "limited":
                    # Flow control: two at a time per key, whichever shard takes the start.
                    n = rng.randrange(1000)
                    self._start(client, "limited", wid, (f"key-{rng.randrange(4)}", n), ("value", 2 * n))
                    self.count("limited")
                else:
                    n, go = rng.randrange(1000), rng.randrange(1000)
                    self._start(client, "racer", wid, (n,), ("value", n + go))
                    # A "go" sent twice leaves the second pending; once it finished, it is closed.
                    self.call(f"go {wid}", lambda: client.get_handle(wid).signal("go", go), tolerate=(WorkflowClosed,))
                    self.count("signals")
        with self.lock:
            self.open_accs += accs

    def _start(self, client: Client, wf_type: str, wid: str, args: tuple[Any, ...], expect: tuple[str, Any]) -> None:
        with self.lock:
            self.expected[wid] = expect  # before the call: a start that seems to fail may land
        self.call(f"start {wid}", lambda: client.start(wf_type, *args, id=wid, if_exists="return"))
        self.count("workflows")

    def _start_acc(self, client: Client, rng: random.Random, wid: str) -> Acc:
        acc = Acc(wid, rng.randrange(1000), rng.randint(1, 12))
        with self.lock:
            self.expected[wid] = ("acc", acc)
        if rng.random() < 0.3:  # created together with its first add
            token, value = f"{wid}:0", rng.randint(1, 100)
            acc.values[token] = value
            self.call(
                f"signal_with_start {wid}",
                lambda: client.signal_with_start("accumulator", acc.n, signal="add", payload=[token, value], id=wid, if_exists="return"),
            )
            self.count("signals")
        else:
            self.call(f"start {wid}", lambda: client.start("accumulator", acc.n, id=wid, if_exists="return"))
        self.count("workflows")
        return acc

    def _add(self, client: Client, rng: random.Random, acc: Acc, via: str) -> None:
        token, value = f"{acc.wid}:{len(acc.values) + 1}", rng.randint(1, 100)
        acc.values[token] = value
        handle = client.get_handle(acc.wid)
        if via == "signal":
            self.call(f"signal {token}", lambda: handle.signal("add", [token, value]))
            self.count("signals")
            return
        total = self.call(f"update {token}", lambda: handle.update("add", token, value, request_id=token))
        self.count("updates")
        if total != acc.total:
            # Every earlier add was acknowledged before this update was sent, and a workflow
            # applies its inbox in order: the answer is the running sum.
            self.violation(f"{acc.wid}: update {token} answered {total}, expected the running sum {acc.total}")

    def _close(self, client: Client, acc: Acc) -> None:
        with self.lock:
            self.expected[acc.wid] = ("acc", acc)
        count = len(acc.values)
        self.call(f"close {acc.wid}", lambda: client.get_handle(acc.wid).signal("close", count), tolerate=(WorkflowClosed,))
        self.count("signals")

    # -- checking and finishing ---------------------------------------------------------------

    def _stop_and_check(self, when: str) -> None:
        code = self._terminate()
        if code != 0:
            self.violation(f"supervisor drain {when} exited {code}, not 0")
        checker = subprocess.run(
            [sys.executable, "-m", "weft_actors.check", "--data", self.read_location],
            capture_output=True, text=True, timeout=120, env=self.sup.env,
        )
        self.count("checker_runs")
        if checker.returncode != 0:
            problems = [line for line in checker.stdout.splitlines() if line and "problem(s) found" not in line]
            for problem in problems[:50]:
                self.violation(f"checker {when}: {problem}")
            if not problems:
                self.violation(f"checker {when} exited {checker.returncode}: {checker.stderr.strip()[-500:]}")
        self.log(f"checker {when}: {checker.stdout.strip().splitlines()[-1] if checker.stdout.strip() else checker.stderr.strip()}")

    def _finish_phase(self) -> None:
        """No more faults: close every open accumulator, then check every workflow's result."""
        with Client(self.sup.endpoint, timeout=10) as client:
            for acc in self.open_accs:
                self._close(client, acc)
            for wid, (kind, expect) in sorted(self.expected.items()):
                handle = client.get_handle(wid)
                try:
                    value = self.call(f"result {wid}", lambda: handle.result(timeout=20))
                except GaveUp:
                    raise
                except WeftError as exc:
                    if kind == "failed":
                        if exc.code != "workflow_failed" or str(getattr(exc, "type", "")).rpartition(".")[2] != expect:
                            self.violation(f"{wid}: ended with {exc.code} ({getattr(exc, 'type', None)}): {exc}; expected a failure of type {expect}")
                        continue
                    if (kind, expect) != ("error", exc.code):
                        self.violation(f"{wid}: ended with {exc.code}: {exc}; expected {kind} {expect!r}")
                    continue
                except TimeoutError:
                    self.violation(f"{wid}: no result within 20s after the chaos ended")
                    continue
                if kind == "nap":
                    self._judge_nap(wid, value, *expect)
                elif kind == "acc":
                    acc: Acc = expect
                    want = {"sum": 2 * acc.n + acc.total, "count": len(acc.values)}
                    got = {"sum": value.get("sum"), "count": value.get("count")}
                    self.count("duplicates", value.get("dups", 0))
                    if got != want:
                        self.violation(f"{wid}: result {got}, expected {want}")
                elif kind == "error" or value != expect:
                    self.violation(f"{wid}: result {value!r}, expected {kind} {expect!r}")
            for status in ("running", "pending", "quarantined"):
                page = self.call("list", lambda: client.list(status=status, limit=20))
                if page["items"]:
                    self.violation(f"{status} workflows left after every result: {[item['id'] for item in page['items']]}")


    def _judge_nap(self, wid: str, value: list[float], seconds: float, started: float, forced: bool = False) -> None:
        """A timer must not wake before its wall-clock time. The nap reads ``ctx.now()``,
        sleeps (its timer is due ``seconds`` after the clock reading of that moment, one
        commit later) and reads ``ctx.now()`` again on waking. A backward step of the clock
        between the first reading and the sleep, or between the wake and the second reading,
        makes a timely wake look early: such a nap is not judged. For the naps of a clock
        fault (``forced``), which start a second before the step, the first gap is their
        first commit, well inside that second."""
        before, after = value
        steps = [at for at, amount in (self.clock_faults.steps if self.clock_faults is not None else []) if amount < 0]
        due = started + seconds
        early = (started - 0.1, started + 0.8) if forced else (started - 0.1, due + 10)
        if any(early[0] <= at <= early[1] or due - 0.1 <= at <= due + 10 for at in steps):
            self.count("naps_unjudged")
            return
        if after < before + seconds - 1e-3:
            self.violation(f"{wid}: a {seconds}s timer woke {after - before:.3f}s after it was set, on the wall clock")


if __name__ == "__main__":
    from chaos_cli import main  # the command line (many runs, --postgres) lives there

    sys.exit(main())
