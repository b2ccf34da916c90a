"""A commit first takes what is queued for the engine (``GroupCommitter.before_flush``: a
shard's drain of its sockets), so a request that came while the last pass ran rides in this
commit instead of waiting a whole commit more; a failing hook costs no commit."""

from __future__ import annotations

import asyncio

import pytest

from _support import run
from weft_actors import Engine, workflow

pytestmark = pytest.mark.timeout(30)


@workflow
async def echo(ctx, x: int) -> int:
    return x


def test_what_the_hook_submits_rides_in_the_commit_it_precedes(tmp_path) -> None:
    async def main() -> None:
        async with Engine(str(tmp_path), app=[echo]) as engine:
            await engine.execute(echo, 0)  # the store and the engine are warm
            committer = engine.committer
            loop = asyncio.get_running_loop()
            queued: list[asyncio.Future[object]] = []

            def take_queued() -> None:  # stands for a shard taking the requests on its sockets
                if not queued:
                    future = loop.create_future()
                    engine.starts.submit_start(future, False, echo, (2,), {"id": "queued"})
                    queued.append(future)

            committer.before_flush = take_queued
            first = asyncio.ensure_future(engine.start(echo, 1, id="first"))
            await asyncio.sleep(0)  # the call submits its intent; its flush is scheduled
            assert committer.pending == 1
            before = committer.batches
            committer.flush()  # that flush, run now: the hook's start joins its batch
            assert committer.batches == before + 1  # one commit (their first turns may have submitted more)
            assert queued[0].done() and not isinstance(queued[0].result(), Exception)
            assert (await asyncio.wait_for(first, 5)).id == "first"
            committer.before_flush = None
            assert await engine.get_handle("queued").result() == 2

    run(main())


def test_a_failing_hook_still_commits_the_batch(tmp_path, caplog) -> None:
    async def main() -> None:
        async with Engine(str(tmp_path), app=[echo]) as engine:

            def broken() -> None:
                raise RuntimeError("no sockets")

            engine.committer.before_flush = broken
            assert await engine.execute(echo, 7) == 7
            engine.committer.before_flush = None

    run(main())
    assert "taking the requests before a commit failed" in caplog.text
