"""``python -m weft_actors.check``: clean stores pass; each kind of corruption is reported."""

from __future__ import annotations

import asyncio
import time

import lmdb
import pytest

from weft_actors import Engine, activity, workflow
from weft_actors.check import main as check_main
from weft_actors.codec import pack_record, unpack_record
from weft_actors.store import check_store


@activity
async def noop(x: int) -> int:
    return x


@workflow
async def small(ctx, x: int) -> int:
    await ctx.run(noop, x)
    return await ctx.wait_signal("go")


def _populate(path: str) -> None:
    async def main() -> None:
        async with Engine(path, app=[small]) as engine:
            done = await engine.start(small, 1, id="done")
            await done.signal("go", 5)
            await done.result(timeout=5)
            await engine.start(small, 2, id="parked")
            await engine.get_handle("parked").signal("early", 1)
            deadline = time.monotonic() + 5
            while not engine.store.load_ops("parked", (await engine.get_handle("parked").describe())["run_id"]):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)

    asyncio.run(main())


def _kinds(path: str) -> set[str]:
    return {p.kind for p in check_store(path, time.time())}


def _corrupt(path: str, db: bytes, action) -> None:
    env = lmdb.open(path, max_dbs=20, map_size=1 << 40)
    try:
        with env.begin(write=True) as txn:
            action(txn, env.open_db(db, txn=txn))
    finally:
        env.close()


@pytest.fixture
def store_path(tmp_path):
    path = str(tmp_path / "data")
    _populate(path)
    return path


def test_a_store_written_by_the_engine_is_clean(store_path, capsys):
    assert check_store(store_path, time.time()) == []
    assert check_main(["--data", store_path]) == 0
    assert "0 problem(s)" in capsys.readouterr().out


def test_holder_on_a_finished_workflow_is_reported(store_path, capsys):
    def add_holder(txn, db):
        txn.put(b"done", bytes(16) + (99).to_bytes(8, "big") + bytes(8), db=db)

    _corrupt(store_path, b"claim_holder", add_holder)
    assert {"holder_on_terminal", "holder_epoch_mismatch", "by_engine_missing"} <= _kinds(store_path)
    assert check_main(["--data", store_path]) == 1
    assert "holder_on_terminal [done]" in capsys.readouterr().out


def test_missing_by_engine_entry_makes_a_running_workflow_unreclaimable(store_path):
    def drop_index(txn, db):
        keys = [key for key in txn.cursor(db=db).iternext(values=False) if key.endswith(b"parked")]
        assert keys
        for key in keys:
            txn.delete(key, db=db)

    _corrupt(store_path, b"by_engine", drop_index)
    # The engine released it on close, so it was indexed as ownerless: now no engine finds it.
    assert "running_unreclaimable" in _kinds(store_path)


def test_two_outcomes_at_one_delivery_ordinal_are_reported(store_path):
    def duplicate(txn, db):
        key, value = next(iter(txn.cursor(db=db)))
        record = unpack_record(value)
        txn.put(key[:-4] + (999).to_bytes(4, "big"), pack_record(record), db=db)

    _corrupt(store_path, b"ops", duplicate)
    assert "duplicate_outcome" in _kinds(store_path)


def test_a_message_both_consumed_and_pending_is_reported(store_path):
    env = lmdb.open(store_path, max_dbs=20, map_size=1 << 40)
    try:
        with env.begin(write=True) as txn:
            ops_db, inbox_db = env.open_db(b"ops", txn=txn), env.open_db(b"inbox", txn=txn)
            for key, value in txn.cursor(db=ops_db):
                record = unpack_record(value)
                if record.get("inbox") is not None:
                    wid_len = int.from_bytes(key[:2], "big")
                    inbox_key = key[: 2 + wid_len] + record["inbox"].to_bytes(8, "big")
                    txn.put(inbox_key, pack_record({"kind": "signal", "name": "go", "payload": b"\xc0"}), db=inbox_db)
                    break
            else:
                raise AssertionError("no consuming op found")
    finally:
        env.close()
    assert "message_consumed_but_pending" in _kinds(store_path)


def test_stale_visibility_entry_is_reported(store_path):
    def stale(txn, db):
        txn.put(b"\x02\x00\x05small" + bytes(8) + b"ghost", b"", db=db)

    _corrupt(store_path, b"visibility", stale)
    assert "visibility_stale" in _kinds(store_path)
