"""The checker on a damaged store: it lists what it cannot read (keyspace and key) and exits
non-zero, never with a traceback; a truncated or garbled ``data.mdb`` gives one clear line."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time

import lmdb
import pytest

from test_check import _populate
from weft_actors.check import main as check_main
from weft_actors.codec import pack_record
from weft_actors.store import check_store

pytestmark = pytest.mark.timeout(60)

GARBAGE = b"\xc1\xff\x00garbage"  # 0xc1 is never valid msgpack


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pristine") / "data")
    _populate(path)
    return path


@pytest.fixture
def store_path(pristine, tmp_path):
    path = str(tmp_path / "data")
    shutil.copytree(pristine, path)
    return path


def _edit(path: str, action) -> None:
    env = lmdb.open(path, max_dbs=20, map_size=1 << 40)
    try:
        with env.begin(write=True) as txn:
            action(txn, lambda name: env.open_db(name, txn=txn))
    finally:
        env.close()


def _unreadable(path: str) -> list:
    return [p for p in check_store(path, time.time()) if p.kind == "unreadable_record"]


def _cli(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "weft_actors.check", "--data", path], capture_output=True, text=True, timeout=60
    )


def test_a_garbage_workflow_record_is_listed_with_its_keyspace_and_key(store_path, capsys):
    _edit(store_path, lambda txn, db: txn.put(b"done", GARBAGE, db=db(b"workflows")))

    found = _unreadable(store_path)
    assert [(p.workflow_id, "workflows key b'done'" in p.detail) for p in found] == [("done", True)]
    assert check_main(["--data", store_path]) == 1
    out = capsys.readouterr().out
    assert "unreadable_record [done]: workflows key b'done'" in out


def test_a_record_without_the_fields_the_checks_need_is_listed(store_path):
    _edit(store_path, lambda txn, db: txn.put(b"parked", pack_record({"status": 7}), db=db(b"workflows")))

    (problem,) = _unreadable(store_path)
    assert problem.workflow_id == "parked" and "status" in problem.detail


def test_a_garbage_op_record_is_listed(store_path):
    def spoil(txn, db):
        key = next(iter(txn.cursor(db=db(b"ops")).iternext(values=False)))
        txn.put(key, GARBAGE, db=db(b"ops"))

    _edit(store_path, spoil)
    (problem,) = _unreadable(store_path)
    assert problem.detail.startswith("ops key ") and problem.workflow_id in ("done", "parked")


def test_garbage_holder_epoch_engine_timer_and_request_entries_are_listed(store_path):
    def spoil(txn, db):
        txn.put(b"parked", b"\x01\x02", db=db(b"claim_holder"))
        txn.put(b"parked", b"\x05", db=db(b"claim_epoch"))
        txn.put(bytes(16), GARBAGE, db=db(b"engines"))
        txn.put(b"\x00\x01", pack_record({"kind": "sleep"}), db=db(b"timers"))
        txn.put(b"\x00\x06parkedreq", GARBAGE, db=db(b"requests"))
        txn.put(b"\xff\xfe", b"", db=db(b"by_engine"))

    _edit(store_path, spoil)
    listed = {p.detail.split(" key ")[0] for p in _unreadable(store_path)}
    assert listed == {"claim_holder", "claim_epoch", "engines", "timers", "requests", "by_engine"}
    assert check_main(["--data", store_path]) == 1


def test_the_command_reports_corrupted_records_without_a_traceback(store_path):
    _edit(store_path, lambda txn, db: txn.put(b"done", GARBAGE, db=db(b"workflows")))

    result = _cli(store_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert "unreadable_record [done]" in result.stdout


def test_an_unreadable_schema_version_is_a_clear_error(store_path):
    _edit(store_path, lambda txn, db: txn.put(b"schema", b"\xff\xfe", db=db(b"meta")))

    result = _cli(store_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "corrupted" in result.stderr


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_a_damaged_data_file_is_one_clear_error_and_exit_2(store_path, damage):
    data = os.path.join(store_path, "data.mdb")
    if damage == "truncated":
        os.truncate(data, os.path.getsize(data) // 2)
    else:
        raw = bytearray(open(data, "rb").read())
        rng = random.Random(1)
        for index in range(8192, len(raw)):  # the two meta pages stay, every data page goes
            raw[index] = rng.randrange(256)
        with open(data, "wb") as file:
            file.write(raw)

    result = _cli(store_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")
    assert "truncated or garbled" in result.stderr or "corrupted" in result.stderr
