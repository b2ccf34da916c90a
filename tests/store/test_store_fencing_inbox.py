"""Conformance: fenced step commits, group commit, the durable inbox and the change feed."""

from __future__ import annotations

from weft_actors.codec import decode, encode
from weft_actors.errors import FencedOut, WorkflowClosed, WorkflowNotFound
from weft_actors.store import AppendAndConsume, AppendInbox, Created, Finish, StepCommit, TimerRef


def _stale_commit(kit, wid, epoch, run_id, seq):
    """A StepCommit that would leave a trace in every keyspace it touches."""
    return StepCommit(
        wid,
        epoch,
        run_id,
        ops=(kit.op(1), kit.op(2)),
        consume=(seq,),
        timers_put=(TimerRef(kit.clock.now() + 30, 7, "sleep"),),
        finish=Finish("completed", encode("stale")),
    )


def _assert_untouched(store, wid, run_id, seq, holder):
    assert store.load_ops(wid, run_id) == {}
    assert [s for s, _ in store.load_inbox(wid)] == [seq]
    assert store.count("timers") == 0
    record = store.get_workflow(wid)
    assert record["status"] == "running"
    assert record["result"] is None
    assert store.get_holder(wid)[:2] == holder
    assert wid in [item["id"] for item in store.list_workflows(status="running")["items"]]
    assert store.list_workflows(status="completed")["items"] == []


def test_step_commit_after_takeover_is_fenced_out_and_writes_nothing(kit):
    store = kit.store
    loser, winner = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(loser)
    (seq,) = store.apply(winner, [AppendInbox(wid, "signal", "go", encode(1))])
    assert store.takeover(winner, [(wid, store.get_holder_bytes(wid))]) == {wid: epoch + 1}

    (result,) = store.apply(loser, [_stale_commit(kit, wid, epoch, run_id, seq)])

    assert isinstance(result, FencedOut)
    assert result.workflow_id == wid
    _assert_untouched(store, wid, run_id, seq, (winner, epoch + 1))
    assert store.held_by(winner) == [wid]
    assert store.held_by(loser) == []


def test_step_commit_with_a_future_epoch_is_fenced_out_and_writes_nothing(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    (seq,) = store.apply(eid, [AppendInbox(wid, "signal", "go", encode(1))])

    (result,) = store.apply(eid, [_stale_commit(kit, wid, epoch + 1, run_id, seq)])

    assert isinstance(result, FencedOut)
    _assert_untouched(store, wid, run_id, seq, (eid, epoch))


def test_step_commit_by_a_non_holder_with_the_right_epoch_is_fenced_out(kit):
    store = kit.store
    owner, intruder = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(owner)
    (seq,) = store.apply(owner, [AppendInbox(wid, "signal", "go", encode(1))])

    (result,) = store.apply(intruder, [_stale_commit(kit, wid, epoch, run_id, seq)])

    assert isinstance(result, FencedOut)
    _assert_untouched(store, wid, run_id, seq, (owner, epoch))


def test_step_commit_on_a_released_workflow_is_fenced_out(kit):
    store = kit.store
    eid, peer = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(eid)
    store.release_engine(eid)

    (result,) = store.apply(peer, [StepCommit(wid, epoch, run_id, ops=(kit.op(1),))])

    assert isinstance(result, FencedOut)
    assert store.load_ops(wid, run_id) == {}


def test_finish_naming_another_run_is_fenced_out_and_writes_nothing(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    wrong_run = kit.create_intent().run_id

    (result,) = store.apply(
        eid, [StepCommit(wid, epoch, wrong_run, ops=(kit.op(1),), finish=Finish("completed", encode(1)))]
    )

    assert isinstance(result, FencedOut)
    assert store.load_ops(wid, wrong_run) == {}
    assert store.get_workflow(wid)["status"] == "running"
    assert store.get_holder(wid)[:2] == (eid, epoch)


def test_fenced_intent_fails_alone_and_the_rest_of_the_batch_commits(kit):
    store = kit.store
    eid, thief = kit.engine(), kit.engine()
    first, first_run, first_epoch = kit.start(eid)
    stale, stale_run, stale_epoch = kit.start(eid)
    last, last_run, last_epoch = kit.start(eid)
    (seq,) = store.apply(eid, [AppendInbox(stale, "signal", "go", encode(1))])
    assert store.takeover(thief, [(stale, store.get_holder_bytes(stale))]) == {stale: stale_epoch + 1}
    commits = store.commits

    results = store.apply(
        eid,
        [
            StepCommit(first, first_epoch, first_run, ops=(kit.op(1),)),
            _stale_commit(kit, stale, stale_epoch, stale_run, seq),
            StepCommit(last, last_epoch, last_run, ops=(kit.op(1), kit.op(2)), finish=Finish("completed", encode(9))),
        ],
    )

    assert results[0] is None
    assert isinstance(results[1], FencedOut)
    assert results[2] is None
    assert store.commits == commits + 1
    assert list(store.load_ops(first, first_run)) == [1]
    assert list(store.load_ops(last, last_run)) == [1, 2]
    assert store.get_workflow(last)["status"] == "completed"
    assert store.load_ops(stale, stale_run) == {}
    assert [s for s, _ in store.load_inbox(stale)] == [seq]
    assert store.count("timers") == 0
    assert store.get_workflow(stale)["status"] == "running"


def test_step_commit_records_ops_and_timers_for_the_holder(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    timer = TimerRef(kit.clock.now() + 5, 1, "sleep")

    results = store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(1, "charge"), kit.op(2, "ship")), timers_put=(timer,))])

    assert results == [None]
    ops = store.load_ops(wid, run_id)
    assert sorted(ops) == [1, 2]
    assert ops[1]["name"] == "charge" and ops[2]["name"] == "ship"
    assert ops[2]["outcome"] == {"ok": 2}
    assert store.count("timers") == 1

    assert store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(3),), timers_del=(timer,))]) == [None]
    assert store.count("timers") == 0
    assert sorted(store.load_ops(wid, run_id)) == [1, 2, 3]


def test_ops_of_one_run_are_not_read_as_another_runs(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    assert store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(1),), finish=Finish("completed", encode(1)))]) == [None]
    intent = kit.create_intent(wid, if_exists="start_new")
    (created,) = store.apply(eid, [intent])

    assert store.load_ops(wid, intent.run_id) == {}
    assert list(store.load_ops(wid, run_id)) == [1]
    assert created.epoch == epoch + 1


# -- group commit ------------------------------------------------------------------------------


def test_one_apply_of_n_intents_is_one_commit_and_n_writes(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    commits, writes = store.commits, store.writes

    results = store.apply(
        eid,
        [
            kit.create_intent(),
            kit.create_intent(),
            AppendInbox(wid, "signal", "go", encode(1)),
            StepCommit(wid, epoch, run_id, ops=(kit.op(1),)),
            AppendInbox("missing", "signal", "go", encode(1)),
        ],
    )

    assert len(results) == 5
    assert isinstance(results[0], Created) and isinstance(results[1], Created)
    assert isinstance(results[4], WorkflowNotFound)
    assert store.commits == commits + 1
    assert store.writes == writes + 5


def test_each_apply_is_its_own_commit(kit):
    store = kit.store
    eid = kit.engine()
    commits, writes = store.commits, store.writes

    for _ in range(3):
        store.apply(eid, [kit.create_intent(), kit.create_intent()])

    assert store.commits == commits + 3
    assert store.writes == writes + 6
    assert len(kit.listed_ids()) == 6


def test_one_batch_can_create_and_signal_the_same_workflow(kit):
    store = kit.store
    eid = kit.engine()
    intent = kit.create_intent()

    created, seq = store.apply(eid, [intent, AppendInbox(intent.wid, "signal", "go", encode(1))])

    assert created.created
    assert [s for s, _ in store.load_inbox(intent.wid)] == [seq]


# -- inbox and feed ----------------------------------------------------------------------------


def test_append_inbox_to_an_unknown_workflow_is_workflow_not_found(kit):
    store = kit.store
    eid = kit.engine()

    (result,) = store.apply(eid, [AppendInbox("ghost", "signal", "go", encode(1))])

    assert isinstance(result, WorkflowNotFound)
    assert result.workflow_id == "ghost"
    assert store.read_feed(0) == []
    assert store.feed_head() == 0
    assert store.load_inbox("ghost") == []


def test_append_inbox_returns_increasing_sequence_numbers_across_commits(kit):
    store = kit.store
    eid = kit.engine()
    a, _, _ = kit.start(eid)
    b, _, _ = kit.start(eid)

    first = store.apply(eid, [AppendInbox(a, "signal", "s", encode(1)), AppendInbox(b, "signal", "s", encode(2))])
    second = store.apply(eid, [AppendInbox(a, "update", "u", encode(3), request_id="r-1")])
    seqs = first + second

    assert all(isinstance(seq, int) for seq in seqs)
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert store.feed_head() == seqs[-1]


def test_read_feed_returns_seq_and_workflow_in_order_after_a_cursor(kit):
    store = kit.store
    eid = kit.engine()
    a, _, _ = kit.start(eid)
    b, _, _ = kit.start(eid)
    seqs = store.apply(eid, [AppendInbox(w, "signal", "s", encode(i)) for i, w in enumerate([a, b, a, b, b])])

    assert store.read_feed(0) == list(zip(seqs, [a, b, a, b, b]))
    assert store.read_feed(seqs[1]) == list(zip(seqs[2:], [a, b, b]))
    assert store.read_feed(seqs[-1]) == []
    assert store.read_feed(0, limit=2) == list(zip(seqs[:2], [a, b]))


def test_load_inbox_is_fifo_and_keeps_the_message(kit):
    store = kit.store
    eid = kit.engine()
    wid, _, _ = kit.start(eid)
    other, _, _ = kit.start(eid)
    s1, _ = store.apply(eid, [AppendInbox(wid, "signal", "first", encode("p1")), AppendInbox(other, "signal", "x", encode(0))])
    (s2,) = store.apply(eid, [AppendInbox(wid, "update", "second", encode("p2"), request_id="req-7")])
    (s3,) = store.apply(eid, [AppendInbox(wid, "cancel", "", b"")])

    inbox = store.load_inbox(wid)

    assert [seq for seq, _ in inbox] == [s1, s2, s3]
    assert [(m["kind"], m["name"]) for _, m in inbox] == [("signal", "first"), ("update", "second"), ("cancel", "")]
    assert decode(inbox[0][1]["payload"]) == "p1"
    assert inbox[1][1]["request_id"] == "req-7"
    assert inbox[0][1]["request_id"] is None
    assert [m["name"] for _, m in store.load_inbox(other)] == ["x"]


def test_consuming_an_inbox_entry_deletes_it_in_the_same_commit_as_its_op(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    s1, s2 = store.apply(eid, [AppendInbox(wid, "signal", "a", encode(1)), AppendInbox(wid, "signal", "b", encode(2))])
    commits = store.commits

    (result,) = store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(1, "signal:a"),), consume=(s1,))])

    assert result is None
    assert store.commits == commits + 1
    assert [seq for seq, _ in store.load_inbox(wid)] == [s2]
    assert store.load_ops(wid, run_id)[1]["name"] == "signal:a"
    # The feed keeps its history; only the inbox entry is consumed.
    assert [seq for seq, _ in store.read_feed(0)] == [s1, s2]


def test_inbox_survives_a_reopen(store_factory, kit):
    store = kit.store
    eid = kit.engine()
    wid, _, _ = kit.start(eid)
    (seq,) = store.apply(eid, [AppendInbox(wid, "signal", "go", encode("kept"))])
    store.close()

    reopened = store_factory()

    assert [(s, decode(m["payload"])) for s, m in reopened.load_inbox(wid)] == [(seq, "kept")]
    assert reopened.read_feed(0) == [(seq, wid)]
    assert reopened.get_holder(wid)[:2] == (eid, 1)


# -- a signal its parked owner consumes in the appending transaction ---------------------------


def _take(wid, epoch, run_id, payload, op_seq=1):
    record = {"kind": "signal", "name": "go", "t": 1, "ok": encode(payload)}
    return AppendAndConsume(AppendInbox(wid, "signal", "go", encode(payload)), epoch, run_id, op_seq, record)


def test_append_and_consume_records_the_op_and_leaves_no_inbox_entry(kit):
    store = kit.store
    owner = kit.engine()
    wid, run_id, epoch = kit.start(owner)
    ((seq, consumed),) = store.apply(owner, [_take(wid, epoch, run_id, "now")])
    assert consumed is True
    assert store.load_inbox(wid) == []
    assert store.load_ops(wid, run_id) == {1: {"kind": "signal", "name": "go", "t": 1, "ok": encode("now"), "inbox": seq}}
    assert (seq, wid) in store.read_feed(0)  # other engines still see that the workflow got mail


def test_append_and_consume_leaves_the_message_when_an_older_one_waits(kit):
    """FIFO per workflow: a message appended earlier (by any engine) must be taken first."""
    store = kit.store
    owner, other = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(owner)
    (older,) = store.apply(other, [AppendInbox(wid, "signal", "go", encode("first"))])
    ((seq, consumed),) = store.apply(owner, [_take(wid, epoch, run_id, "second")])
    assert consumed is False
    assert [(s, decode(m["payload"])) for s, m in store.load_inbox(wid)] == [(older, "first"), (seq, "second")]
    assert store.load_ops(wid, run_id) == {}


def test_append_and_consume_by_a_stale_owner_only_appends(kit):
    store = kit.store
    loser, winner = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(loser)
    store.takeover(winner, [(wid, store.get_holder_bytes(wid))])
    ((seq, consumed),) = store.apply(loser, [_take(wid, epoch, run_id, "late")])
    assert consumed is False
    assert [s for s, _ in store.load_inbox(wid)] == [seq]  # for the new owner to take
    assert store.load_ops(wid, run_id) == {}


def test_append_and_consume_to_a_finished_workflow_is_refused_and_writes_nothing(kit):
    store = kit.store
    owner = kit.engine()
    wid, run_id, epoch = kit.start(owner)
    assert kit.finish(owner, wid, epoch, run_id) is None
    feed = store.read_feed(0)
    (result,) = store.apply(owner, [_take(wid, epoch, run_id, "too late")])
    assert isinstance(result, WorkflowClosed)
    assert store.load_inbox(wid) == [] and store.read_feed(0) == feed


# -- a signal's request id: sent twice (a client's resend after a failover), delivered once ----


def test_a_signal_sent_twice_under_one_request_id_is_appended_once(store_factory, kit, store, fake_clock):
    from weft_actors.store import check_store

    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    signal = AppendInbox(wid, "signal", "approve", encode(True), "req-1")
    (seq,) = store.apply(eid, [signal])
    (repeat,) = store.apply(eid, [signal])
    assert isinstance(seq, int) and repeat["state"] == "sent" and repeat["inbox"] == seq
    # The direct path (the owner parked on it) drops a repeat too: nothing appended or consumed.
    op_record = encode({"kind": "signal", "name": "approve", "outcome": {"ok": encode(True)}})
    (direct,) = store.apply(eid, [AppendAndConsume(signal, epoch, run_id, 0, {"kind": "signal", "name": "approve"})])
    assert direct == (repeat, False)
    _, _, ops, inbox = store.load_for_replay(wid)
    assert [entry_seq for entry_seq, _ in inbox] == [seq] and ops == {}
    # Another id is another signal; consumed, the entry of a signal is no unanswered request.
    (second,) = store.apply(eid, [AppendInbox(wid, "signal", "approve", encode(False), "req-2")])
    (committed,) = store.apply(eid, [StepCommit(wid, epoch, run_id, ops=((0, op_record),), consume=(seq, second))])
    assert not isinstance(committed, Exception), committed
    store.close()
    assert [problem.kind for problem in check_store(store_factory.location, fake_clock.now())] == []
