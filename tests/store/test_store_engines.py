"""Conformance: the engine registry on a fake clock, deposed engines, the ownership-mode
marker, and confirming a peer's death through its lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from weft_actors.codec import encode
from weft_actors.errors import EngineDeposed, OwnershipModeMismatch
from weft_actors.store import AppendInbox, Created, StepCommit


def _advance_to(clock, when):
    clock.advance(when - clock.now())
    assert clock.now() == when


def test_register_engine_records_a_live_engine_with_its_lease(kit, fake_clock):
    store = kit.store
    now = fake_clock.now()
    eid = kit.engine()

    record = store.engines()[eid]

    assert record["state"] == "live"
    assert record["heartbeat"] == kit.HEARTBEAT
    assert record["ttl"] == kit.TTL
    assert record["expires_at"] == pytest.approx(now + kit.TTL, abs=1e-3)


def test_heartbeat_extends_expires_at_from_the_current_time(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    fake_clock.advance(1.0)

    returned = store.heartbeat(eid)

    assert returned["expires_at"] == pytest.approx(fake_clock.now() + kit.TTL, abs=1e-3)
    assert store.engines()[eid]["expires_at"] == pytest.approx(fake_clock.now() + kit.TTL, abs=1e-3)


def test_heartbeat_stores_the_feed_cursor(kit):
    store = kit.store
    eid = kit.engine()

    store.heartbeat(eid, feed_cursor=17)

    assert store.engines()[eid]["cursor"] == 17


def test_apply_carries_a_heartbeat_once_one_is_due(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    registered = store.engines()[eid]["expires_at"]

    fake_clock.advance(kit.HEARTBEAT / 2)  # not due yet
    store.apply(eid, [kit.create_intent()])
    assert store.engines()[eid]["expires_at"] == registered

    fake_clock.advance(kit.HEARTBEAT / 2)  # due now
    store.apply(eid, [kit.create_intent()])
    assert store.engines()[eid]["expires_at"] == pytest.approx(fake_clock.now() + kit.TTL, abs=1e-3)


def test_apply_at_exactly_the_expiry_boundary_still_commits(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    record = store.engines()[eid]
    _advance_to(fake_clock, record["expires_at"] + 2 * record["heartbeat"])

    intent = kit.create_intent()
    (result,) = store.apply(eid, [intent])

    assert isinstance(result, Created) and result.created
    assert store.get_workflow(intent.wid) is not None


def test_apply_one_ms_after_the_expiry_boundary_is_deposed_and_commits_nothing(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    record = store.engines()[eid]
    _advance_to(fake_clock, record["expires_at"] + 2 * record["heartbeat"])
    fake_clock.advance(0.001)
    commits, writes = store.commits, store.writes
    create = kit.create_intent()

    results = store.apply(
        eid,
        [
            create,
            AppendInbox(wid, "signal", "go", encode(1)),
            StepCommit(wid, epoch, run_id, ops=(kit.op(1),)),
        ],
    )

    assert len(results) == 3
    assert all(isinstance(r, EngineDeposed) for r in results), results
    assert store.get_workflow(create.wid) is None
    assert store.get_epoch(create.wid) == 0
    assert store.load_inbox(wid) == []
    assert store.read_feed(0) == []
    assert store.load_ops(wid, run_id) == {}
    assert (store.commits, store.writes) == (commits, writes)
    # The deposed engine's lease was not renewed by the failed apply.
    assert store.engines()[eid]["expires_at"] == record["expires_at"]


def test_heartbeat_after_expiry_is_deposed(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    record = store.engines()[eid]
    _advance_to(fake_clock, record["expires_at"] + 2 * record["heartbeat"])
    fake_clock.advance(0.001)

    with pytest.raises(EngineDeposed):
        store.heartbeat(eid)

    assert store.engines()[eid]["expires_at"] == record["expires_at"]


def test_heartbeat_within_the_grace_keeps_the_engine_alive(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    record = store.engines()[eid]
    _advance_to(fake_clock, record["expires_at"] + 2 * record["heartbeat"])

    store.heartbeat(eid)
    fake_clock.advance(kit.TTL)

    (result,) = store.apply(eid, [kit.create_intent()])
    assert isinstance(result, Created)


def test_unregistered_engine_commits_nothing(kit):
    store = kit.store
    intent = kit.create_intent()

    (result,) = store.apply(uuid.uuid4().hex, [intent])

    assert isinstance(result, EngineDeposed)
    assert store.get_workflow(intent.wid) is None


def test_mark_engine_dead_deposes_apply_and_heartbeat(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)

    assert store.mark_engine_dead(eid) is True

    create = kit.create_intent()
    results = store.apply(eid, [create, StepCommit(wid, epoch, run_id, ops=(kit.op(1),))])
    assert all(isinstance(r, EngineDeposed) for r in results), results
    assert store.get_workflow(create.wid) is None
    assert store.load_ops(wid, run_id) == {}
    with pytest.raises(EngineDeposed):
        store.heartbeat(eid)
    assert store.engines()[eid]["state"] == "dead"


def test_mark_engine_dead_is_idempotent(kit):
    store = kit.store
    eid = kit.engine()

    assert store.mark_engine_dead(eid) is True
    assert store.mark_engine_dead(eid) is False
    assert store.mark_engine_dead(eid) is False
    assert store.mark_engine_dead(uuid.uuid4().hex) is False
    assert store.engines()[eid]["state"] == "dead"


def test_mark_engine_dead_leaves_other_engines_live(kit):
    store = kit.store
    dead, alive = kit.engine(), kit.engine()

    store.mark_engine_dead(dead)

    (result,) = store.apply(alive, [kit.create_intent()])
    assert isinstance(result, Created)
    assert store.heartbeat(alive)["state"] == "live"


def test_released_engine_commits_nothing(kit):
    store = kit.store
    eid = kit.engine()
    kit.start(eid)

    store.release_engine(eid)

    (result,) = store.apply(eid, [kit.create_intent()])
    assert isinstance(result, EngineDeposed)
    with pytest.raises(EngineDeposed):
        store.heartbeat(eid)
    assert store.engines()[eid]["state"] != "live"


# -- ownership-mode marker ----------------------------------------------------------------------


def test_single_engine_refused_on_a_workflow_lease_store_and_nothing_written(kit):
    store = kit.store
    kit.engine()  # the first engine marks the store "workflow-lease"
    before = store.engines()
    eid = uuid.uuid4().hex

    with pytest.raises(OwnershipModeMismatch) as info:
        store.register_engine(eid, heartbeat=kit.HEARTBEAT, ttl=kit.TTL, mode="single")

    assert "single" in str(info.value) and "workflow-lease" in str(info.value)
    assert store.engines() == before
    (result,) = store.apply(eid, [kit.create_intent()])
    assert isinstance(result, EngineDeposed)


def test_workflow_lease_engine_refused_on_a_single_store(kit):
    store = kit.store
    kit.engine(mode="single")
    before = store.engines()

    with pytest.raises(OwnershipModeMismatch):
        kit.engine(mode="workflow-lease")

    assert store.engines() == before


def test_marker_survives_the_first_engine_leaving(store_factory, kit):
    store = kit.store
    first = kit.engine()
    store.release_engine(first)
    store.close()
    reopened = store_factory()

    with pytest.raises(OwnershipModeMismatch):
        kit.engine(reopened, mode="single")
    kit.engine(reopened, mode="workflow-lease")


def test_single_store_refuses_a_second_live_engine(kit):
    store = kit.store
    first = kit.engine(mode="single")
    before = store.engines()

    with pytest.raises(OwnershipModeMismatch):
        kit.engine(mode="single")

    assert store.engines() == before
    assert list(before) == [first]


def test_single_store_accepts_a_new_engine_once_the_old_one_is_gone(kit):
    store = kit.store
    first = kit.engine(mode="single")
    store.release_engine(first)

    second = kit.engine(mode="single")

    assert store.engines()[second]["state"] == "live"


def test_workflow_lease_store_accepts_many_live_engines(kit):
    store = kit.store
    engines = {kit.engine() for _ in range(3)}

    assert {eid for eid, r in store.engines().items() if r["state"] == "live"} == engines


# -- process_gone and peers in other processes ---------------------------------------------


_CHILD = """
import sys
{open_store}
engine_id, mode = sys.argv[1], sys.argv[2]
store.register_engine(engine_id, heartbeat=0.5, ttl=3.0, mode=mode)
print("registered", flush=True)
command = sys.stdin.readline().strip()
if command == "release":
    store.release_engine(engine_id)
elif command == "close":
    store.close()
print("done", flush=True)
sys.stdin.read()  # stay alive until the parent closes our stdin
"""


class ChildEngine:
    """An engine registered by a store instance in another process."""

    def __init__(self, backend_hook, mode: str = "workflow-lease") -> None:
        self.engine_id = uuid.uuid4().hex
        source = textwrap.dedent(_CHILD.format(open_store=backend_hook("child_store_source")()))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", source, self.engine_id, mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __enter__(self) -> "ChildEngine":
        assert self.proc.stdout.readline().strip() == "registered"
        return self

    def command(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        else:
            self.proc.stdin.close()
        self.proc.stdout.close()


def _lock_is_a_hint(store) -> bool:
    """On PostgreSQL a free liveness lock says only that a connection ended: ``process_gone``
    needs the lease expired too. LMDB's lock file dies with its process alone."""
    return type(store).__name__ == "PgStore"


def _still_not_gone(store, eid: str, settle: float = 5.0) -> bool:
    """``process_gone`` stays False while the lease holds, once the lock is surely free."""
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        if store.process_gone(eid):
            return False
        row = store.env.conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = %s::oid",
            (store.env.lock_key,),
        ).fetchone()
        if row[0] == 0:  # no engine lock of this store is held: the child's is free
            return not store.process_gone(eid)
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("how", ["release", "close", "kill"])
def test_process_gone_for_an_engine_of_another_process_only_once_it_lets_go(kit, backend_hook, how):
    store = kit.store
    with ChildEngine(backend_hook) as child:
        eid = child.engine_id
        assert store.engines()[eid]["state"] == "live"

        assert store.process_gone(eid) is False
        assert store.process_gone(eid) is False  # asking does not break the lock

        if how == "kill":
            child.kill()
        else:
            child.command(how)
            assert child.proc.poll() is None  # still running: only the lock was let go
        if how != "release" and _lock_is_a_hint(store):
            # A free PostgreSQL lock only says a connection ended (a blip does that to a live
            # engine too): the engine is gone once its lease has expired as well.
            assert _still_not_gone(store, eid)
            kit.clock.advance(kit.TTL + 2 * kit.HEARTBEAT + 0.1)
        # On PostgreSQL the server frees a session's locks when its backend has seen the
        # connection end, a moment after the client let go.
        deadline = time.monotonic() + 5.0
        while not store.process_gone(eid):
            assert time.monotonic() < deadline, "the engine's process let go, yet it is not gone"
            time.sleep(0.01)


@pytest.mark.parametrize("how", ["release", "close"])
def test_process_gone_for_an_engine_of_another_instance_in_this_process(store_factory, kit, how):
    store = kit.store
    other = store_factory()
    eid = kit.engine(other)

    assert store.process_gone(eid) is False
    assert store.process_gone(eid) is False

    if how == "release":
        other.release_engine(eid)
    else:
        other.close()
        if _lock_is_a_hint(store):
            assert store.process_gone(eid) is False  # its lease holds (see above)
            kit.clock.advance(kit.TTL + 2 * kit.HEARTBEAT + 0.1)

    assert store.process_gone(eid) is True
    assert store.list_workflows()["items"] == []  # this instance still works


def test_process_gone_is_false_for_an_engine_this_instance_registered(kit):
    store = kit.store
    eid = kit.engine()

    assert store.process_gone(eid) is False


def test_process_gone_is_true_after_this_instance_releases_the_engine(kit):
    store = kit.store
    eid = kit.engine()
    store.release_engine(eid)

    assert store.process_gone(eid) is True


def test_process_gone_is_false_without_a_lock_file(kit, store_factory):
    """No lock file proves nothing (it may have been deleted under a live engine): death is
    then confirmed by the supervisor's reaping or by expiry, never by its absence."""
    assert kit.store.process_gone(uuid.uuid4().hex) is False
    if store_factory.name != "lmdb":
        return  # the rest deletes LMDB's lock file: PostgreSQL's lock is the server's
    eid = kit.engine(store_factory())
    os.unlink(os.path.join(kit.store.path, "engines", eid + ".lock"))
    assert kit.store.process_gone(eid) is False


def test_single_store_restarts_once_its_predecessors_process_is_gone(kit, backend_hook):
    store = kit.store
    with ChildEngine(backend_hook, mode="single") as child:
        child.kill()

        successor = kit.engine(mode="single")

    engines = store.engines()
    assert engines[successor]["state"] == "live"
    assert engines[child.engine_id]["state"] == "dead"


def test_single_store_refuses_while_its_predecessors_process_lives(kit, backend_hook):
    store = kit.store
    with ChildEngine(backend_hook, mode="single") as child:
        before = store.engines()

        with pytest.raises(OwnershipModeMismatch):
            kit.engine(mode="single")

        assert store.engines() == before
        assert before[child.engine_id]["state"] == "live"


def test_refused_single_engine_marks_no_peer_dead(kit, backend_hook):
    """A misconfigured engine refused by the marker writes nothing, not even the death of a
    peer whose process has gone (that is the supervisor's call)."""
    store = kit.store
    with ChildEngine(backend_hook) as child:  # marks the store "workflow-lease"
        wid, _, _ = kit.start(kit.engine())
        child.kill()
        before = store.engines()

        with pytest.raises(OwnershipModeMismatch):
            kit.engine(mode="single")

        assert store.engines() == before
        assert before[child.engine_id]["state"] == "live"
