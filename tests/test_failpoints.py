"""Crash consistency: a real engine process dies at a chosen point of a group commit
(``WEFT_FAILPOINT``); an engine restarted on the same directory finds a clean store, every
acknowledged start and signal, and finishes every workflow with the right result.

Run as a script (``python test_failpoints.py DATA``) this file is the child: it starts
workflows and signals them in small concurrent groups, printing each acknowledgement (the
call returned, so its commit is durable) before the next, until the failpoint ends it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from weft_actors import Engine, activity, workflow
from weft_actors.errors import WorkflowClosed

WORKFLOWS = 120
GROUP = 6


@activity
async def double(n: int) -> int:
    return 2 * n


@workflow
async def flow(ctx, n: int) -> int:
    doubled = await ctx.run(double, n)
    added = await ctx.wait_signal("add")  # a repeated signal stays pending: harmless
    await ctx.sleep(0.01)
    return doubled + added


APP = [flow]


def expected(n: int) -> int:
    return 3 * n


# -- the child --------------------------------------------------------------------------------


def _ack(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _child(data: str) -> None:
    async with Engine(data, app=APP, heartbeat=0.2, ttl=0.6) as engine:
        _ack(f"engine {engine.engine_id}")
        for first in range(0, WORKFLOWS, GROUP):
            batch = range(first, first + GROUP)

            async def start(n: int) -> None:
                await engine.start(flow, n, id=f"w{n}")
                _ack(f"start w{n}")

            async def signal(n: int) -> None:
                await engine.signal(f"w{n}", "add", n)
                _ack(f"signal w{n}")

            await asyncio.gather(*(start(n) for n in batch))
            await asyncio.gather(*(signal(n) for n in batch))
        _ack("finished")  # only if the failpoint was never reached


# -- the tests ----------------------------------------------------------------------------------


def _run_child(data: str, spec: str) -> tuple[int, list[str], str]:
    env = {**os.environ, "WEFT_FAILPOINT": spec}
    proc = subprocess.run([sys.executable, __file__, data], env=env, capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


async def _recover(data: str, acked_starts: set[str], acked_signals: set[str]) -> dict[str, int]:
    """Restart on the same directory: resend every signal not acknowledged (a duplicate stays
    pending and changes no result), and collect every workflow's result."""
    results: dict[str, int] = {}
    async with Engine(data, app=APP, heartbeat=0.2, ttl=0.6) as engine:
        present = {f"w{n}" for n in range(WORKFLOWS) if engine.store.get_workflow(f"w{n}") is not None}
        missing = acked_starts - present
        assert not missing, f"acknowledged starts lost: {sorted(missing)}"
        for wid in sorted(present - acked_signals):
            try:
                await engine.signal(wid, "add", int(wid[1:]))
            except WorkflowClosed:
                pass  # it had the signal already and finished
        for wid in sorted(present):
            results[wid] = await engine.get_handle(wid).result(timeout=15)
    return results


@pytest.mark.parametrize("point", ["before", "after-apply", "after-commit"])
@pytest.mark.parametrize("nth", [1, 17, 61])
def test_a_crash_at_a_failpoint_loses_nothing_acknowledged(tmp_path, point, nth):
    from weft_actors.store import check_store

    data = str(tmp_path / "data")
    code, lines, stderr = _run_child(data, f"commit:{point}:{nth}")
    assert code == 137, f"exit {code}\n{stderr[-2000:]}"
    assert f"failpoint commit:{point}:{nth} reached" in stderr
    assert "finished" not in lines
    acked_starts = {line.split()[1] for line in lines if line.startswith("start ")}
    acked_signals = {line.split()[1] for line in lines if line.startswith("signal ")}
    if nth == 1:
        assert not acked_starts  # the very first commit never completed
    else:
        assert acked_starts, "the child acknowledged nothing before its failpoint"

    assert check_store(data, time.time()) == []  # consistent as the crash left it
    results = asyncio.run(_recover(data, acked_starts, acked_signals))
    assert acked_starts <= set(results)
    assert {wid: value for wid, value in results.items() if value != expected(int(wid[1:]))} == {}
    assert check_store(data, time.time()) == []


def test_failpoints_are_inert_unless_set_and_refuse_a_malformed_spec(tmp_path):
    from weft_actors.shard._failpoints import failpoint_from_env

    assert failpoint_from_env({}) is None
    assert failpoint_from_env({"WEFT_FAILPOINT": ""}) is None
    armed = failpoint_from_env({"WEFT_FAILPOINT": "commit:after-apply:3"})
    assert (armed.point, armed.nth) == ("after-apply", 3)
    assert failpoint_from_env({"WEFT_FAILPOINT": "commit:before"}).nth == 1
    for bad in ("commit", "commit:middle", "commit:before:0", "commit:before:x", "store:before:1"):
        with pytest.raises(ValueError, match="WEFT_FAILPOINT"):
            failpoint_from_env({"WEFT_FAILPOINT": bad})

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP) as engine:
            assert engine.committer.failpoint is None and engine.store.before_commit is None
            handle = await engine.start(flow, 2)
            await handle.signal("add", 1)
            assert await handle.result(timeout=5) == 5

    os.environ.pop("WEFT_FAILPOINT", None)
    asyncio.run(main())


if __name__ == "__main__":
    asyncio.run(_child(sys.argv[1]))


def test_a_stop_failpoint_is_armed_once_across_processes(tmp_path):
    from weft_actors.shard._failpoints import failpoint_from_env

    marker = tmp_path / "once"
    env = {"WEFT_FAILPOINT": "commit:after-apply:2:stop", "WEFT_FAILPOINT_ONCE": str(marker)}
    armed = failpoint_from_env(env)
    assert (armed.point, armed.nth, armed.stop, armed.once) == ("after-apply", 2, True, str(marker))
    assert failpoint_from_env({"WEFT_FAILPOINT": "commit:before"}).stop is False
    with pytest.raises(ValueError, match="WEFT_FAILPOINT"):
        failpoint_from_env({"WEFT_FAILPOINT": "commit:before:1:pause"})
    marker.write_text("1")  # another process reached it first: this one passes
    armed.batch()
    armed.batch()
    armed.hit("after-apply")
