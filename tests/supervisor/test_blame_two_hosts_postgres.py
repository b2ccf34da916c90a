"""Two supervisors ("hosts", each with a local directory of its own) on one PostgreSQL schema:
a blocking activity stalls host A's shard, host A freezes (a paused VM: no supervisor of its
own is left to kill the shard or record its death), and host B takes A's workflows over once
A's lease lapses. The only evidence is A's stall note, which lives in the store: B charges the
culprit alone and quarantines it at that first stall; A's other workflows are taken over once,
never charged, and complete on B."""

from __future__ import annotations

import signal

import psycopg
import pytest

from _processes import RunningSupervisor, wait_until
from _two_hosts import new_schema
from weft_actors import Client
from weft_actors.codec import unpack_record
from weft_actors.errors import WeftError

APP = "blame_app"
ARGS = ("--heartbeat", "0.4", "--ttl", "2")
STALL = 30.0  # host A never comes back from it by itself


def _rows(url: str, table: str) -> list[tuple[bytes, bytes]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [(bytes(k), bytes(v)) for k, v in conn.execute(f"SELECT k, v FROM {table}").fetchall()]


def _runs(path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


@pytest.mark.timeout(150)
def test_a_stall_note_in_the_store_lets_another_host_blame_only_the_culprit(postgres_url, tmp_path):
    url = new_schema(postgres_url)
    runs = tmp_path / "runs"
    runs.mkdir()
    homes = {name: tmp_path / f"host-{name}" for name in "ab"}
    for home in homes.values():
        home.mkdir()
    with (
        RunningSupervisor(url, shards=1, app=APP, args=ARGS, env={"TMPDIR": str(homes["a"])}) as host_a,
        RunningSupervisor(url, shards=1, app=APP, args=ARGS, env={"TMPDIR": str(homes["b"])}) as host_b,
        Client(host_a.endpoint, timeout=10) as on_a,
        Client(host_b.endpoint, timeout=10) as on_b,
    ):
        neighbours = [on_a.start("long_running", str(runs / f"n-{i}"), 6.0, id=f"n-{i}").id for i in range(5)]
        wait_until(lambda: all(_runs(runs / wid) >= 1 for wid in neighbours), timeout=30, what="the neighbours' activities running on host A")
        with Client(host_a.endpoint, timeout=0.5) as starter:  # short: A must freeze before its supervisor acts
            try:
                starter.start("blocker", STALL, id="poison", if_exists="return")
            except (WeftError, TimeoutError):
                pass  # its shard may block before the reply leaves
        wait_until(lambda: any(k.startswith(b"stall/") for k, _ in _rows(url, "weft_meta")), timeout=10, what="host A's stall note in the store")
        host_a.signal_group(signal.SIGSTOP)  # frozen: only its note speaks for it
        try:
            wait_until(lambda: on_b.get_handle("poison").describe()["status"] == "quarantined", timeout=60, what="quarantined by host B", interval=0.2)
            described = on_b.get_handle("poison").describe()
            assert described["lost_owners"]["count"] == 1
            assert described["lost_owners"]["reason"] == "op #0 activity 'blocks'"
            for wid in neighbours:
                assert on_b.get_handle(wid).result(timeout=40) == "done"
                assert on_b.get_handle(wid).describe()["lost_owners"] is None
                assert _runs(runs / wid) == 2  # once on A, once more on B
            engines = [unpack_record(value) for _, value in _rows(url, "weft_engines")]
            assert not any(record.get("blame") for record in engines), engines  # no death was recorded: the note did it
            assert not any(homes["b"].glob("weft-pg-*/engines/*.stall"))  # nothing of A's on B's disk
        finally:
            host_a.signal_group(signal.SIGCONT)
