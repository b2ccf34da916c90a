"""The checks added for the chaos runs: claims of unknown engines, stale timers, and updates
left pending without their message. Each kind of corruption is reported; clean stores pass."""

from __future__ import annotations

import asyncio
import time

import lmdb
import pytest

from weft_actors import Engine, workflow
from weft_actors.codec import pack_record, unpack_record
from weft_actors.store import check_store


@workflow
async def napper(ctx) -> str:
    ctx.on_update("poke", lambda: "poked")
    await ctx.sleep(3600)
    return "woke"


def _populate(path: str) -> None:
    async def main() -> None:
        async with Engine(path, app=[napper]) as engine:
            await engine.start(napper, id="nap")
            done = await engine.start(napper, id="done")
            assert await done.update("poke", request_id="r-1") == "poked"
            await done.terminate("enough")

    asyncio.run(main())


@pytest.fixture
def store_path(tmp_path):
    path = str(tmp_path / "data")
    _populate(path)
    assert check_store(path, time.time()) == []
    return path


def _edit(path: str, action) -> None:
    env = lmdb.open(path, max_dbs=20, map_size=1 << 40)
    try:
        with env.begin(write=True) as txn:
            action(txn, lambda name: env.open_db(name, txn=txn))
    finally:
        env.close()


def _kinds(path: str) -> set[str]:
    return {p.kind for p in check_store(path, time.time())}


def test_a_claim_of_an_engine_missing_from_the_registry_is_reported(store_path):
    def hold(txn, db):
        # Held by an engine nobody registered: no reclaim pass would ever look at it.
        stranger = bytes.fromhex("ab" * 16)
        epoch = int.from_bytes(txn.get(b"nap", db=db(b"claim_epoch")), "big")
        for key in [k for k in txn.cursor(db=db(b"by_engine")).iternext(values=False) if k.endswith(b"nap")]:
            txn.delete(key, db=db(b"by_engine"))
        txn.put(b"nap", stranger + epoch.to_bytes(8, "big") + bytes(8), db=db(b"claim_holder"))
        txn.put(stranger + b"nap", b"", db=db(b"by_engine"))

    _edit(store_path, hold)
    assert _kinds(store_path) == {"holder_engine_unknown"}


def test_a_timer_of_a_finished_workflow_or_of_another_run_is_reported(store_path):
    def stale(txn, db):
        timers = db(b"timers")
        key, value = next(k for k in txn.cursor(db=timers) if k[0].endswith(b"nap"))
        txn.put(key[:-3] + b"done", value, db=timers)  # a timer of a terminated workflow

    _edit(store_path, stale)
    problems = check_store(store_path, time.time())
    assert [(p.kind, p.workflow_id) for p in problems] == [("timer_stale", "done")]

    def other_run(txn, db):
        timers = db(b"timers")
        key, value = next(k for k in txn.cursor(db=timers) if k[0].endswith(b"nap"))
        txn.put(key, pack_record({**unpack_record(value), "run_id": "00" * 16}), db=timers)

    _edit(store_path, other_run)
    assert "not the current run" in " ".join(str(p) for p in check_store(store_path, time.time()))


def test_an_update_pending_without_its_message_is_reported(store_path):
    def lose_message(txn, db):
        prefix = len(b"nap").to_bytes(2, "big") + b"nap"
        txn.put(prefix + b"r-9", pack_record({"state": "pending", "inbox": 12345, "at": 0.0}), db=db(b"requests"))

    _edit(store_path, lose_message)
    problems = check_store(store_path, time.time())
    assert [(p.kind, p.workflow_id) for p in problems] == [("request_unanswered", "nap")]
    assert "r-9" in str(problems[0])
