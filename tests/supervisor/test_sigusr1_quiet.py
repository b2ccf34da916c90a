"""``SIGUSR1`` under a steady load of plain starts through the front door: the shard to hand
off is first taken out of the routing and waited on until the front door holds no write of
it unanswered (``_quiet``, as a roll and a resize do), so no start the front door had sent it
and it had not read when it stopped reading is lost with it: none is answered
``OutcomeUnknown``, each lands once. The race (starts routed to the shard just before it was
taken out, arriving just after it read its ``hand-off``) is narrow, so several handoffs run."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from _processes import RunningSupervisor
from _support import eventually
from weft_actors import AsyncClient, Client

pytestmark = pytest.mark.timeout(120)

CONCURRENCY = 400
"""Starts out at once: the front door always has some on their way to each shard."""
HANDOFFS = 16


def test_sigusr1_under_a_load_of_plain_starts_answers_every_one(tmp_path: Path) -> None:
    with RunningSupervisor(tmp_path / "data", shards=2, app="handoff_app") as sup:
        started, failures = asyncio.run(_starts_over_handoffs(sup))
        with Client(sup.endpoint, timeout=30) as client:
            listed, cursor = 0, None
            while True:
                page = client.list(type="quick", limit=1000, cursor=cursor)
                listed += len(page["items"])
                cursor = page.get("cursor")
                if not cursor:
                    break
    assert failures == [], failures[:5]
    assert len(started) > 1000 and listed == len(started)  # each answered start landed once


def _handed(sup: RunningSupervisor) -> int:
    return sum(" handed " in line and "workflows to" in line for line in sup.stderr_lines)


async def _starts_over_handoffs(sup: RunningSupervisor) -> tuple[list[str], list[BaseException]]:
    started: list[str] = []
    failures: list[BaseException] = []
    running = True
    async with AsyncClient(sup.endpoint, timeout=30) as client:

        async def starts(value: int) -> None:
            while running:
                try:
                    started.append((await client.start("quick", value)).id)  # a plain start: no id, not resendable
                except Exception as exc:  # noqa: BLE001 - the assertion names it
                    failures.append(exc)
                    await asyncio.sleep(0.01)

        workers = [asyncio.ensure_future(starts(k)) for k in range(CONCURRENCY)]
        try:
            await eventually(lambda: len(started) > 500, 30)
            for count in range(1, HANDOFFS + 1):  # slot 0, 1, 0, ...: each once the last is back
                os.kill(sup.process.pid, signal.SIGUSR1)
                await eventually(lambda: _handed(sup) >= count, 30)
            after = len(started)
            await eventually(lambda: len(started) > after + 500, 30)  # and some after them
        finally:
            running = False  # each worker ends once its start is answered (recorded)
            await asyncio.wait_for(asyncio.gather(*workers), 60)
    return started, failures
