"""A call waiting on a shard that hands its workflows off keeps waiting (``WorkflowMoved``):
an ``execute`` whose start is committed, with or without a fixed id, and a ``result``, are
answered by the successor, through the front door or a direct client (one whose loop reads
the draining shard's last replies only after that shard exited included); no start is
applied twice and no activity runs twice."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from _processes import RunningSupervisor, wait_until
from _support import eventually
from weft_actors import AsyncClient, Client
from weft_actors._placement import preferred
from weft_actors.bus._frames import readable

pytestmark = pytest.mark.timeout(120)

EXECUTES = 8
CHARGE_SECONDS = 1.5
NAP_SECONDS = 2.0


@pytest.mark.parametrize("path", ["front-door", "direct"])
def test_executes_waiting_on_a_draining_shard_are_answered_by_the_successor(tmp_path: Path, path: str) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    tags = [f"x{i}" for i in range(EXECUTES)]
    results: dict[str, object] = {}

    def execute(tag: str, fixed_id: bool) -> None:
        options: dict[str, Any] = {"id": tag} if fixed_id else {}
        try:
            if path != "front-door":  # sent straight to the shard: the client itself follows the move
                results[tag] = asyncio.run(execute_direct(tag, options))
                return
            with Client(sup.endpoint, timeout=60) as client:
                results[tag] = client.execute("charge_then_nap", tag, CHARGE_SECONDS, NAP_SECONDS, timeout=50, **options)
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            results[tag] = exc

    async def execute_direct(tag: str, options: dict[str, Any]) -> Any:
        async with AsyncClient(sup.endpoint, timeout=60, direct=True) as client:
            return await client.execute("charge_then_nap", tag, CHARGE_SECONDS, NAP_SECONDS, timeout=50, **options)

    def wait_result(tag: str) -> None:
        with Client(sup.endpoint, timeout=60) as client:
            try:
                results["result " + tag] = client.get_handle(tag).result(timeout=50)
            except Exception as exc:  # noqa: BLE001
                results["result " + tag] = exc

    with RunningSupervisor(tmp_path / "data", shards=2, app="handoff_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        # Half with a fixed id (default if_exists: not resendable as it is), half without.
        callers = [threading.Thread(target=execute, args=(tag, i % 2 == 0), daemon=True) for i, tag in enumerate(tags)]
        for thread in callers:
            thread.start()
        wait_until(lambda: len(list(runs.glob("*.start.*"))) == EXECUTES, 20, "every charge running")
        waiters = [threading.Thread(target=wait_result, args=(tag,), daemon=True) for tag in tags[::2]]
        for thread in waiters:
            thread.start()
        os.kill(sup.process.pid, signal.SIGUSR1)
        handed = wait_until(lambda: next((line for line in sup.stderr_lines if "workflows to" in line and " handed " in line), None), 30, "the handoff logged")
        match = re.search(r"handed (\d+) workflows to \w+ \(0 released\)", handed)
        assert match is not None and int(match.group(1)) > 0, handed  # some executes waited on the draining shard
        for thread in callers + waiters:
            thread.join(60)
        with Client(sup.endpoint, timeout=30) as client:
            listed = client.list(type="charge_then_nap", limit=100)["items"]
    assert results == {**{tag: f"charged {tag}" for tag in tags}, **{"result " + tag: f"charged {tag}" for tag in tags[::2]}}, results
    assert len(listed) == EXECUTES  # no start applied twice
    for tag in tags:  # each charge ran once: the draining shard let its attempts finish
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag


def test_a_direct_reply_read_only_after_its_shard_exited_is_still_its_answer(tmp_path: Path) -> None:
    """The exact race, forced: a draining shard sends a direct client its ``workflow_moved``
    replies and exits before the client's loop reads them (the loop is held until the
    client's socket has seen the connection end). The replies were received all the same,
    so each wait goes on at the successor: no ``OutcomeUnknown`` for a start that landed."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunningSupervisor(tmp_path / "data", shards=2, app="handoff_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        results, held = asyncio.run(_hold_the_loop_over_a_handoff(sup, runs))
        with Client(sup.endpoint, timeout=30) as client:
            listed = client.list(type="charge_then_nap", limit=100)["items"]
    assert held  # the loop was held with executes out on the shard that went away
    assert results == {tag: f"charged {tag}" for tag in results} and len(results) == 4, results
    assert len(listed) == 4  # no start applied twice
    for tag in results:
        assert len(list(runs.glob(f"{tag}.start.*"))) == 1, tag


async def _hold_the_loop_over_a_handoff(sup: RunningSupervisor, runs: Path) -> tuple[dict[str, object], int]:
    async with AsyncClient(sup.endpoint, timeout=60, direct=True) as client:
        routes = client._direct
        assert routes is not None
        await routes.ready()
        assert len(routes.engines) == 2
        tags: list[str] = []
        for engine_id in routes.engines:  # two fixed ids (not resendable as they are) on each shard
            tags += [tag for tag in (f"r{i}" for i in range(200)) if preferred(tag, routes.engines) == engine_id][:2]
        calls = {tag: asyncio.ensure_future(client.execute("charge_then_nap", tag, CHARGE_SECONDS, NAP_SECONDS, timeout=50, id=tag)) for tag in tags}
        await eventually(lambda: len(list(runs.glob("*.start.*"))) == len(tags), 20)
        shards = list(routes.shards.values())
        for shard in shards:  # the monitors' news so far (the handshakes) taken in
            routes._watch(shard)
        os.kill(sup.process.pid, signal.SIGUSR1)
        # Held here, the loop reads nothing until the draining shard has replied, exited, and
        # the client's zmq thread has seen its connection end.
        gone = wait_until(lambda: next((shard for shard in shards if readable(shard.watch.monitor)), None), 30, "a shard's connection ended")
        held = len(gone.sent)
        results: dict[str, object] = {}
        for tag, call in calls.items():
            try:
                results[tag] = await call
            except Exception as exc:  # noqa: BLE001 - the assertion names it
                results[tag] = exc
        return results, held


def test_new_requests_reaching_a_draining_shard_directly_go_through_the_front_door(tmp_path: Path) -> None:
    """A direct client idle while a shard began to drain still has the directory from before
    (it polls only while requests are out), so it sends new starts, single and batched, to
    the draining shard. That shard takes none of them; it turns each away at once and the
    client sends it through the front door: each lands once, none ``OutcomeUnknown``."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunningSupervisor(tmp_path / "data", shards=2, app="handoff_app", env={"WEFT_TEST_RUNS": str(runs)}) as sup:
        results = asyncio.run(_start_on_a_draining_shard(sup, runs))
        assert results == {wid: wid for wid in results} and len(results) == 5, results
        with Client(sup.endpoint, timeout=30) as client:
            listed = client.list(type="quick", limit=100)["items"]
            values = sorted(client.get_handle(str(wid)).result(timeout=30) for wid in results)
    assert len(listed) == 5 and values == sorted(int(wid[1:]) for wid in results)  # each started once


async def _start_on_a_draining_shard(sup: RunningSupervisor, runs: Path) -> dict[str, object]:
    async with AsyncClient(sup.endpoint, timeout=30, direct=True) as client:
        routes = client._direct
        assert routes is not None
        await routes.ready()
        engines = list(routes.engines)
        for engine_id in engines:  # a long charge on each shard: the draining one's grace lasts
            tag = next(tag for tag in (f"c{i}" for i in range(200)) if preferred(tag, engines) == engine_id)
            await client.start("charge_then_nap", tag, 4.0, 0.01, id=tag)
        await eventually(lambda: len(list(runs.glob("*.start.*"))) == 2, 20)
        os.kill(sup.process.pid, signal.SIGUSR1)
        line = await eventually(lambda: next((line for line in sup.stderr_lines if " draining to engine " in line), None), 20)
        draining = next(engine_id for engine_id in engines if engine_id not in line)
        assert routes.engines == engines and draining in routes.shards  # the directory from before
        wids = [wid for wid in (f"q{i}" for i in range(400)) if preferred(wid, engines) == draining][:5]
        results: dict[str, object] = {}

        async def single(wid: str) -> None:  # a fixed id, default if_exists: not resendable as it is
            try:
                results[wid] = (await client.start("quick", int(wid[1:]), id=wid)).id
            except Exception as exc:  # noqa: BLE001 - the assertion names it
                results[wid] = exc

        async def batch() -> None:
            async for landed in client.start_many([("quick", (int(wid[1:]),), {"id": wid}) for wid in wids[2:]]):
                results[wids[2 + landed.position]] = landed.value.id if landed.error is None else landed.error

        await asyncio.gather(single(wids[0]), single(wids[1]), batch())  # all sent in one loop turn
        return results
