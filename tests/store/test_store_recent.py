"""The ``recent`` index (newest first per status, stored) on both backends: the console's
newest-first pages read it in pages, so a page reads about as many entries as it shows
whatever the store holds; it follows every status change and purge, and a schema-4 store
gets it on its first read-write open."""

from __future__ import annotations

import random
from typing import Any

import lmdb
import psycopg
import pytest

from weft_actors.console._listing import SCAN_BUDGET, ListQuery, newest_first
from weft_actors.errors import SchemaVersionError
from weft_actors.store import CreateWorkflow, LmdbStore, PurgeWorkflow
from weft_actors.codec import encode_args


def _page(store: Any, query: ListQuery) -> dict[str, Any]:
    with store.read() as txn:
        return newest_first(txn, store.dbs, query)


def _all_pages(store: Any, query: ListQuery) -> tuple[list[str], list[int]]:
    """Every id, following cursors; and how many entries each page read."""
    ids: list[str] = []
    scanned: list[int] = []
    after = None
    while True:
        page = _page(store, ListQuery(**{**query.__dict__, "after": after}))
        ids += [item["id"] for item in page["items"]]
        scanned.append(page["scanned"])
        after = page["cursor"]
        if after is None:
            return ids, scanned


def _oracle(store: Any, status: str | None = None, wf_type: str | None = None, low: float | None = None, high: float | None = None) -> list[str]:
    """Newest first, ties by id, from the id-ordered listing (records' status, type, updated)."""
    items, cursor = [], None
    while True:
        page = store.list_workflows(limit=1000, cursor=cursor)
        items += page["items"]
        cursor = page["cursor"]
        if cursor is None:
            break
    chosen = [
        item for item in items
        if (status is None or item["status"] == status) and (wf_type is None or item["type"] == wf_type)
        and (low is None or item["updated"] >= low) and (high is None or item["updated"] <= high)
    ]
    return [item["id"] for item in sorted(chosen, key=lambda item: (-round(item["updated"] * 1000), item["id"].encode()))]


def _populate(kit: Any, count: int, seed: int = 5) -> str:
    """``count`` workflows of two types over several statuses, with ties in time; one purged."""
    rng = random.Random(seed)
    eid = kit.engine()
    runs = []
    for i in range(count):
        runs.append(kit.start(eid, f"w{rng.randrange(10**6):06d}-{i}", wf_type=rng.choice(("T", "U"))))
        if rng.random() < 0.7:
            kit.clock.advance(0.001 * rng.randrange(1, 4))
    for wid, run_id, epoch in runs:
        roll = rng.random()
        if roll < 0.5:
            status = "completed" if roll < 0.35 else "failed"
            assert kit.finish(eid, wid, epoch, run_id, status=status) is None
            kit.clock.advance(0.001 * rng.randrange(0, 3))
    finished = next(item["id"] for item in kit.store.list_workflows(status="completed")["items"])
    assert kit.store.apply(eid, [PurgeWorkflow(finished)]) == [2]
    return eid


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "filters",
    [{}, {"status": "completed"}, {"status": "running"}, {"type": "U"}, {"status": "failed", "type": "T"}, {"window": True}],
    ids=["all", "completed", "running", "type", "status-and-type", "time-window"],
)
def test_pages_follow_the_stored_newest_first_order(kit, filters):
    _populate(kit, 120)
    store = kit.store
    low = high = None
    if filters.pop("window", False):
        times = sorted(item["updated"] for item in store.list_workflows(limit=1000)["items"])
        low, high = times[20], times[-30]
    query = ListQuery(status=filters.get("status"), type=filters.get("type"), updated_from=low, updated_to=high, limit=7)

    ids, scanned = _all_pages(store, query)

    assert ids == _oracle(store, filters.get("status"), filters.get("type"), low, high)
    if query.type is None:  # stored orders: a page reads what it shows (and one more, or one past the range)
        assert all(count <= 8 for count in scanned), scanned


@pytest.mark.timeout(120)
def test_a_page_reads_what_it_shows_however_many_workflows_the_store_holds(kit):
    store = kit.store
    eid = kit.engine()
    for first in range(0, 3000, 500):  # large batches: one transaction each
        intents = [CreateWorkflow(f"bulk-{i:05d}", "Bulk", encode_args((i,)), f"{i:032x}") for i in range(first, first + 500)]
        store.apply(eid, intents)
        kit.clock.advance(0.01)
    newest = [f"bulk-{i:05d}" for i in range(2500, 2520)]  # the last batch, one time, ids ascending

    first = _page(store, ListQuery(limit=20))
    second = _page(store, ListQuery(limit=20, after=first["cursor"]))
    by_status = _page(store, ListQuery(status="running", limit=20, after=first["cursor"]))

    assert [item["id"] for item in first["items"]] == newest
    assert [item["id"] for item in second["items"]] == [f"bulk-{i:05d}" for i in range(2520, 2540)]
    assert by_status["items"] == second["items"]
    assert first["scanned"] <= 21 and second["scanned"] <= 21 and by_status["scanned"] <= 21
    assert first["counts"]["running"] == 3000 and first["counts_exact"]
    # A filter the index is not ordered by reads a bounded number of entries, never the store.
    rare = _page(store, ListQuery(type="Nothing-of-this-type", limit=20))
    assert rare["items"] == [] and rare["scanned"] <= SCAN_BUDGET


def _downgrade_to_v4(backend: Any) -> None:
    """Drop the ``recent`` keyspace and mark the store schema 4 (every instance closed)."""
    if backend.name == "lmdb":
        env = lmdb.open(backend.location, max_dbs=32)
        try:
            with env.begin(write=True) as txn:
                txn.drop(env.open_db(b"recent", txn=txn), delete=True)
        finally:
            env.close()
    else:
        with psycopg.connect(backend.location, autocommit=True) as conn:
            conn.execute("DROP TABLE weft_recent")
    backend.set_schema_version(4)


@pytest.mark.timeout(120)
def test_a_schema_4_store_gets_the_recent_index_on_its_first_read_write_open(store_factory, kit):
    _populate(kit, 60)
    query = ListQuery(limit=500)
    before = _page(kit.store, query)["items"]
    assert len(before) == 59
    kit.store.close()
    _downgrade_to_v4(store_factory)
    if store_factory.name == "lmdb":
        with pytest.raises(SchemaVersionError):
            LmdbStore(store_factory.location, readonly=True).close()

    upgraded = store_factory()

    assert _page(upgraded, query)["items"] == before
    assert _page(upgraded, ListQuery(status="failed", limit=500))["items"] == [item for item in before if item["status"] == "failed"]
    upgraded.close()
    assert store_factory.get_schema_version() == 6


@pytest.mark.timeout(120)
@pytest.mark.parametrize("filters", [{"type": "U"}, {"prefix": "w0"}], ids=["type", "prefix-past-the-count-budget"])
def test_a_page_ended_by_its_read_budget_goes_on_from_where_it_stopped(kit, monkeypatch, filters):
    """With a read budget smaller than the gaps between matches, pages end early (even empty)
    with a cursor; following them still gives every match once, newest first."""
    from weft_actors.console import _listing

    _populate(kit, 80)
    monkeypatch.setattr(_listing, "SCAN_BUDGET", 3)
    monkeypatch.setattr(_listing, "COUNT_BUDGET", 5)  # a prefix past it is read like a type
    query = ListQuery(type=filters.get("type"), prefix=filters.get("prefix", ""), limit=4)

    ids, _ = _all_pages(kit.store, query)

    expected = [wid for wid in _oracle(kit.store, wf_type=query.type) if wid.startswith(query.prefix)]
    assert len(expected) > 5 and ids == expected
