"""A terminate or cancel whose commit landed is answered as a success, even when the engine
stops or is deposed before the caller resumes: the caller's effect is durable, and no raw
storage error (a read of the now closed store) ever reaches it."""

from __future__ import annotations

import asyncio

import pytest

from _support import run
from weft_actors import Engine, workflow
from weft_actors.store import LmdbStore


@workflow
async def idle(ctx) -> None:
    await ctx.wait_signal("never")


async def _commit_then(engine: Engine, call, end: str):
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)  # the call submits its intent
    assert engine.committer.pending == 1
    if end == "close":
        await engine.close()  # its first flush commits the call, then the store closes
    else:
        engine.committer.flush()  # the commit lands and resolves the caller's future ...
        engine.depose("deposed in the test")  # ... which resumes only after this
    return await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("end", ["close", "depose"])
@pytest.mark.parametrize("how", ["terminate", "cancel-pending", "cancel-running"])
def test_a_committed_close_is_a_success_when_the_engine_ends_first(tmp_path, how, end):
    async def main():
        engine = Engine(str(tmp_path), app=[idle])
        await engine.__aenter__()
        try:
            start_delay = 3600 if how == "cancel-pending" else None
            handle = await engine.start(idle, id="w", start_delay=start_delay)
            call = engine.terminate(handle.id, "bye") if how == "terminate" else engine.cancel(handle.id)
            assert await _commit_then(engine, call, end) is None
        finally:
            await engine.__aexit__(None, None, None)

    run(main())
    store = LmdbStore(str(tmp_path))
    try:
        record = store.get_workflow("w")
        if how == "terminate":
            assert record["status"] == "terminated"
        elif how == "cancel-pending":
            assert record["status"] == "cancelled"
        else:  # the request is in the inbox, or the local owner already took it
            inbox = [message["kind"] for _, message in store.load_inbox("w")]
            assert inbox == ["cancel"] or (record["status"] == "cancelled" and inbox == [])
    finally:
        store.close()
