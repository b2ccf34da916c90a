"""End-to-end throughput: N workflows of ``--steps`` activities through a real supervisor.

    python bench/throughput.py --workflows 20000 --shards 2
    python bench/throughput.py --workflows 10000 --sweep 1,2,4

Starts ``python -m weft_actors.supervisor --app bench_app`` on a free loopback port and a
temporary data directory (durable, synced commits: the default), then drives the workflows
through ``AsyncClient`` from ``--clients`` processes with ``--concurrency`` workflows in flight
in total: each worker calls ``execute`` (start and wait for the result, one request), or with
``--call start-result`` ``start`` and then ``result`` on the handle, again and again, or with
``--call execute-many`` one ``execute_many`` batch per client (``--concurrency`` its window).
The client sends each workflow op straight to the shard it is placed on when the server offers
a directory (``AsyncClient(direct=True)``, ``execute_many`` batches too; ``--front-door``:
through the front door, as before). A
latency is the time from the request that starts a workflow to the reply with its result,
measured in the client. A warm-up batch (not counted) runs first; before it all, the same
workflows run on one in-process engine (``engine_throughput.py``, a child process; not with
``--no-in-process``). The timed window (and the client's CPU) runs from the first timed request
to the last answer: each client connects first (one uncounted ``execute``, which fetches the
directory and opens the shard connections), as the in-process engine is open before its clock
starts, and closes after.

Prints one JSON line per shard count on stdout: workflows, shards, steps, seconds,
workflows_per_s, steps_per_s, p50_ms, p99_ms, cpu_s (CPU of the supervisor and its shards
during the timed part), and more: concurrency, clients, client_cpu_s, cpu_by_process
(supervisor first, then shards), other_cpu_s (CPU the rest of the machine used meanwhile:
a disturbed run shows here; the bench first waits up to 60 s for a quiet machine),
disk_write_kb_per_workflow (sectors written to the data directory's block device, from
``/proc/diskstats``: the whole device, so quiet machines only), and
commits and writes_per_commit (from the shards' ``stats()``, which they push once a second,
so read 1.1 s after the run), and per role (``_roles``): cpu_us_per_workflow_by_role
(front_door, shards, server, client), in_process and vs_in_process. A readable table and a progress bar go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import Supervisor, percentile, report, sigterm_as_exit, system_busy_seconds, wait_quiet  # noqa: E402
from _progress import Progress  # noqa: E402
from _pgstore import postgres_cpu_seconds, scratch_schema  # noqa: E402
from _roles import in_process, per_role  # noqa: E402


def _workflow(steps: int) -> tuple[str, tuple[Any, ...]]:
    return ("three_steps", ()) if steps == 3 else ("n_steps", (steps,))


class Window:
    """The timed part of one client's run: wall clock and the client's CPU, from ``open`` (the
    client connected) to ``close`` (its last answer)."""

    def __init__(self) -> None:
        self.started = self.ended = self.cpu = 0.0

    def open(self) -> None:
        self.cpu = -time.process_time()
        self.started = time.perf_counter()

    def close(self) -> None:
        self.ended = time.perf_counter()
        self.cpu += time.process_time()

    @property
    def seconds(self) -> float:
        return self.ended - self.started


WARM_INDEX = 20_000_000
"""Where the workflows a client runs to connect before its window are numbered (uncounted)."""


async def drive(endpoint: str, first: int, count: int, concurrency: int, steps: int, call: str = "execute", done: Any = None, progress: Progress | None = None, direct: bool = True, window: Window | None = None, go: Any = None) -> list[float]:
    """Run workflows ``first .. first+count-1``; return their latencies in seconds. ``call``:
    ``execute`` (one request each), ``start-result`` (``start``, then ``result`` on the
    handle) or ``execute-many`` (one ``execute_many`` batch, ``concurrency`` its window).
    With ``window``: one uncounted ``execute`` connects the client first (the directory, the
    shard connections), then (after ``go``, an event, if given) ``window`` times the run."""
    from weft_actors import AsyncClient

    name, extra = _workflow(steps)
    latencies: list[float] = []
    next_index = first
    end = first + count
    clock = time.perf_counter

    async with AsyncClient(endpoint, timeout=120, direct=direct) as client:

        async def worker() -> None:
            nonlocal next_index
            while next_index < end:
                i = next_index
                next_index += 1
                started = clock()
                if call == "execute":
                    result = await client.execute(name, i, *extra, timeout=300)
                else:
                    handle = await client.start(name, i, *extra)
                    result = await handle.result(timeout=300)
                latencies.append(clock() - started)
                if result != i + steps:
                    raise AssertionError(f"workflow {i}: {result!r} != {i + steps}")
                if progress is not None:
                    progress.advance()
                elif done is not None:
                    with done.get_lock():
                        done.value += 1

        if window is not None:
            await client.execute(name, WARM_INDEX + first, *extra, timeout=300)
            if go is not None:
                await asyncio.get_running_loop().run_in_executor(None, go.wait)
            window.open()
        try:
            if call == "execute-many":
                return await _drive_many(client, name, extra, first, count, concurrency, steps, done, progress)
            await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, count)))))
            return latencies
        finally:
            if window is not None:
                window.close()


async def _drive_many(client: Any, name: str, extra: tuple[Any, ...], first: int, count: int, window: int, steps: int, done: Any, progress: Progress | None) -> list[float]:
    """``drive`` as one ``execute_many`` batch with a window of ``window`` requests. A batch
    sends the items in order, each as soon as a slot frees, so item k's request left when the
    (k - window)-th reply landed (the first ``window`` at once): its latency runs from then."""
    clock = time.perf_counter
    landed_at: list[float] = []
    latencies: list[float] = []
    started = clock()
    async for landed in client.execute_many(((name, (i, *extra)) for i in range(first, first + count)), timeout=300, window=window):
        now = clock()
        position = landed.position
        sent = started if position < window else landed_at[position - window]
        landed_at.append(now)
        latencies.append(now - sent)
        if landed.result() != first + position + steps:
            raise AssertionError(f"workflow {first + position}: {landed.value!r} != {first + position + steps}")
        if progress is not None:
            progress.advance()
        elif done is not None:
            with done.get_lock():
                done.value += 1
    return latencies


class _Gate:
    """A client process's start line: it says it is connected (``ready``), then waits for ``go``."""

    def __init__(self, ready: Any, go: Any) -> None:
        self.ready = ready
        self.go = go

    def wait(self) -> None:
        with self.ready.get_lock():
            self.ready.value += 1
        self.go.wait()


def _client_main(endpoint: str, first: int, count: int, concurrency: int, steps: int, call: str, go: Any, ready: Any, done: Any, conn: Any, direct: bool = True) -> None:
    """A client process: connect, wait for the start signal, drive its slice, send back its
    latencies and its window (wall clock and CPU)."""
    import uvloop

    try:
        window = Window()
        latencies = uvloop.run(drive(endpoint, first, count, concurrency, steps, call, done=done, direct=direct, window=window, go=_Gate(ready, go)))
        conn.send(("ok", latencies, window.cpu, window.started, window.ended))
    except BaseException as exc:  # reported to the parent, which fails the run
        conn.send(("error", repr(exc), 0.0, 0.0, 0.0))
    finally:
        conn.close()


def run_in_processes(endpoint: str, first: int, workflows: int, concurrency: int, steps: int, call: str, clients: int, label: str, direct: bool = True) -> tuple[list[float], float, float]:
    """Drive ``workflows`` from ``clients`` processes; (latencies, wall seconds, client cpu):
    the window runs from the first client's first timed request to the last one's last answer
    (``perf_counter`` is the system's monotonic clock, one for every process)."""
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    ready = ctx.Value("q", 0)
    done = ctx.Value("q", 0)
    children = []
    per = [workflows // clients + (1 if k < workflows % clients else 0) for k in range(clients)]
    start = first
    try:
        for k in range(clients):
            parent, child = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_client_main,
                args=(endpoint, start, per[k], max(1, concurrency // clients), steps, call, go, ready, done, child, direct),
                name=f"bench-client-{k}",
            )
            process.start()
            child.close()
            children.append((process, parent))
            start += per[k]
        deadline = time.monotonic() + 60
        while ready.value < clients:  # every client connected before the clock starts
            for process, conn in children:
                if not process.is_alive() or conn.poll():
                    raise RuntimeError(f"client {process.name} ended before it was ready: {conn.recv() if conn.poll() else process.exitcode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {ready.value} of {clients} clients connected within 60 s")
            time.sleep(0.01)
        progress = Progress(workflows, label)
        go.set()
        latencies: list[float] = []
        cpu = 0.0
        windows: list[tuple[float, float]] = []
        pending = list(children)
        seen = 0
        while pending:
            for process, conn in list(pending):
                if conn.poll(0.05):
                    status, payload, used, began, ended = conn.recv()
                    if status != "ok":
                        raise RuntimeError(f"client {process.name} failed: {payload}")
                    latencies.extend(payload)
                    cpu += used
                    windows.append((began, ended))
                    pending.remove((process, conn))
                elif not process.is_alive() and not conn.poll():
                    raise RuntimeError(f"client {process.name} died (exit {process.exitcode})")
            now_done = done.value
            if now_done > seen:
                progress.advance(now_done - seen)
                seen = now_done
        seconds = max(ended for _, ended in windows) - min(began for began, _ in windows)
        if seen < workflows:
            progress.advance(workflows - seen)
        return latencies, seconds, cpu
    finally:
        for process, conn in children:
            if process.is_alive():
                process.kill()
            process.join(10)
            conn.close()


def shard_counters(endpoint: str) -> tuple[int, int]:
    """(commits, write intents) summed over the shards, from ``stats()``."""
    from weft_actors import Client

    with Client(endpoint, timeout=10) as client:
        shards = client.stats()["shards"]
    return sum(s.get("commits_total", 0) for s in shards), sum(s.get("writes_total", 0) for s in shards)


def run_once(workflows: int, shards: int, steps: int, concurrency: int, clients: int, warmup: int, supervisor_args: tuple[str, ...], quiet: bool = True, call: str = "execute", database_url: str | None = None, direct: bool = True) -> dict[str, Any]:
    import uvloop

    with Supervisor(shards=shards, args=supervisor_args) as supervisor:
        endpoint = supervisor.endpoint
        if warmup:
            uvloop.run(drive(endpoint, 10_000_000, warmup, min(concurrency, warmup), steps, call, direct=direct))
        counters_before = shard_counters(endpoint)
        if quiet:
            wait_quiet()
        busy_before = system_busy_seconds()
        database_before = postgres_cpu_seconds(database_url)
        cpu_before = supervisor.cpu()
        sectors_before = supervisor.disk_sectors()
        if clients == 1:
            progress = Progress(workflows, f"{shards} shard(s)")
            window = Window()
            latencies = uvloop.run(drive(endpoint, 0, workflows, concurrency, steps, call, progress=progress, direct=direct, window=window))
            seconds, client_cpu = window.seconds, window.cpu
        else:
            latencies, seconds, client_cpu = run_in_processes(endpoint, 0, workflows, concurrency, steps, call, clients, f"{shards} shard(s)", direct)
        cpu_after = supervisor.cpu()
        database_cpu = postgres_cpu_seconds(database_url) - database_before
        busy = system_busy_seconds() - busy_before
        sectors_after = supervisor.disk_sectors()
        time.sleep(1.1)  # shards push their counters to the supervisor once a second
        counters_after = shard_counters(endpoint)
        if supervisor.process is not None and supervisor.process.poll() is not None:
            raise RuntimeError("the supervisor exited during the run:\n" + supervisor.log_tail())
    if len(latencies) != workflows:
        raise RuntimeError(f"{len(latencies)} latencies for {workflows} workflows")
    by_process = {str(pid): round(cpu_after.get(pid, 0.0) - cpu_before.get(pid, 0.0), 3) for pid in cpu_before}
    foreign = busy - sum(by_process.values()) - client_cpu - database_cpu
    return {
        "workflows": workflows,
        "shards": shards,
        "steps": steps,
        "call": call,
        "direct": direct,
        "seconds": round(seconds, 3),
        "workflows_per_s": round(workflows / seconds, 1),
        "steps_per_s": round(workflows * steps / seconds, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "cpu_s": round(sum(by_process.values()), 3),
        "concurrency": concurrency,
        "clients": clients,
        "client_cpu_s": round(client_cpu, 3),
        "cpu_by_process": by_process,
        "database_cpu_s": round(database_cpu, 3),
        "cpu_us_per_workflow": {"engine": round(sum(by_process.values()) / workflows * 1e6, 1), "database": round(database_cpu / workflows * 1e6, 1)},
        "other_cpu_s": round(max(0.0, foreign), 2),
        "disk_write_kb_per_workflow": None if sectors_before is None or sectors_after is None else round((sectors_after - sectors_before) * 512 / 1024 / workflows, 1),
        "commits": counters_after[0] - counters_before[0],
        "writes_per_commit": round((counters_after[1] - counters_before[1]) / max(1, counters_after[0] - counters_before[0]), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1000, help="workflows in flight, over all clients")
    parser.add_argument("--call", choices=("execute", "start-result", "execute-many"), default="execute", help="execute: one request per workflow (default); start-result: start, then result; execute-many: one execute_many batch per client, --concurrency its window")
    parser.add_argument("--front-door", action="store_true", help="send every request through the front door, not straight to the shards")
    parser.add_argument("--no-in-process", action="store_true", help="skip the in-process engine run (engine_throughput.py, same N and steps) the per-role figures are compared with")
    parser.add_argument("--clients", type=int, default=1, help="client processes (1: in this process)")
    parser.add_argument("--warmup", type=int, default=None, help="uncounted workflows first (default: min(1000, N/10))")
    parser.add_argument("--no-wait-quiet", action="store_true", help="do not wait for a quiet machine before timing")
    parser.add_argument("--sweep", help="comma-separated shard counts, one run (and one JSON line) each")
    parser.add_argument("--supervisor-arg", action="append", default=[], help="extra supervisor option (repeatable)")
    parser.add_argument("--store", metavar="URL", help="a PostgreSQL URL: the supervisor runs on a fresh schema there instead of LMDB")
    args = parser.parse_args()
    if args.workflows < 1 or args.steps < 1 or args.concurrency < 1 or args.clients < 1:
        parser.error("--workflows, --steps, --concurrency and --clients must be positive")
    warmup = min(1000, args.workflows // 10) if args.warmup is None else args.warmup
    counts = [int(s) for s in args.sweep.split(",")] if args.sweep else [args.shards]
    with sigterm_as_exit():
        inside = None
        if not args.no_in_process:
            if not args.no_wait_quiet:
                wait_quiet()
            inside = in_process(args.workflows, args.steps, args.store)  # a fresh schema of its own on PostgreSQL
        for shards in counts:
            with contextlib.ExitStack() as stack:
                supervisor_args = tuple(args.supervisor_arg)
                if args.store:  # the later --store wins over the harness's --data
                    supervisor_args += ("--store", stack.enter_context(scratch_schema(args.store)))
                result = run_once(args.workflows, shards, args.steps, args.concurrency, args.clients, warmup, supervisor_args, not args.no_wait_quiet, args.call, args.store, not args.front_door)
                result["store"] = "postgresql" if args.store else "lmdb"
                result.update(per_role(result, inside))
            report(result, f"throughput, {shards} shard(s)")


if __name__ == "__main__":
    main()
