"""Conformance: ``list_workflows`` filters and cursor pagination."""

from __future__ import annotations

import base64

import pytest

from weft_actors.errors import InvalidRequest


@pytest.fixture
def population(kit, fake_clock):
    """25 workflows: 15 "Order" (5 of them completed) and 10 "Refund", over several commits
    and clock times so that ``updated`` differs between some and ties between others."""
    store = kit.store
    eid = kit.engine()
    started = {"Order": [], "Refund": []}
    for batch in range(5):
        fake_clock.advance(0.25)
        intents = [kit.create_intent(wf_type="Order") for _ in range(3)]
        intents += [kit.create_intent(wf_type="Refund") for _ in range(2)]
        results = store.apply(eid, intents)
        assert all(r.created for r in results)
        for intent, result in zip(intents, results):
            started[intent.wf_type].append((intent.wid, intent.run_id, result.epoch))
    completed = started["Order"][::3]
    fake_clock.advance(0.25)
    for wid, run_id, epoch in completed:
        assert kit.finish(eid, wid, epoch, run_id) is None
    return {
        "engine": eid,
        "runs": {w: (run_id, epoch) for kind in started.values() for w, run_id, epoch in kind},
        "all": {w for kind in started.values() for w, _, _ in kind},
        "order": {w for w, _, _ in started["Order"]},
        "refund": {w for w, _, _ in started["Refund"]},
        "completed": {w for w, _, _ in completed},
    }


def _pages(store, limit, **filters):
    pages, cursor = [], None
    while True:
        page = store.list_workflows(limit=limit, cursor=cursor, **filters)
        pages.append([item["id"] for item in page["items"]])
        cursor = page["cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "pagination does not terminate"


def test_pages_of_ten_return_every_workflow_exactly_once(kit, population):
    pages = _pages(kit.store, 10)

    assert [len(p) for p in pages] == [10, 10, 5]
    ids = [wid for page in pages for wid in page]
    assert len(ids) == len(set(ids)) == 25
    assert set(ids) == population["all"]


def test_a_full_last_page_has_no_cursor(kit, population):
    pages = _pages(kit.store, 5)

    assert [len(p) for p in pages] == [5] * 5
    assert {wid for page in pages for wid in page} == population["all"]


def test_filter_by_status(kit, population):
    running = population["all"] - population["completed"]

    assert set(kit.listed_ids(status="running")) == running
    assert len(kit.listed_ids(status="running")) == 20
    assert set(kit.listed_ids(status="completed")) == population["completed"]
    assert kit.listed_ids(status="failed") == []
    for item in kit.store.list_workflows(status="completed")["items"]:
        assert item["status"] == "completed" and item["type"] == "Order"


def test_filter_by_type(kit, population):
    assert set(kit.listed_ids(wf_type="Refund")) == population["refund"]
    assert set(kit.listed_ids(wf_type="Order")) == population["order"]
    assert kit.listed_ids(wf_type="Ord") == []
    assert kit.listed_ids(wf_type="Unknown") == []


def test_filter_by_status_and_type_paginates(kit, population):
    expected = population["order"] - population["completed"]

    pages = _pages(kit.store, 4, status="running", wf_type="Order")

    assert [len(p) for p in pages] == [4, 4, 2]
    ids = [wid for page in pages for wid in page]
    assert len(ids) == len(set(ids)) and set(ids) == expected


def test_filter_by_type_alone_paginates(kit, population):
    pages = _pages(kit.store, 3, wf_type="Refund")

    ids = [wid for page in pages for wid in page]
    assert len(ids) == len(set(ids)) == 10
    assert set(ids) == population["refund"]


def test_items_describe_the_workflow(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, _, _ = kit.start(eid, wf_type="Invoice")

    (item,) = store.list_workflows()["items"]

    assert item["id"] == wid
    assert item["type"] == "Invoice"
    assert item["status"] == "running"
    assert item["updated"] == pytest.approx(fake_clock.now(), abs=1e-3)


def test_workflows_that_finish_between_pages_are_neither_repeated_nor_skipped(kit, population):
    store = kit.store
    eid = population["engine"]
    first = store.list_workflows(status="running", limit=10)
    page_one = [item["id"] for item in first["items"]]
    # Before page 2 is read, the last workflow of page 1 (the cursor's own key) finishes,
    # and so does one that page 1 did not reach.
    unseen = sorted(population["all"] - population["completed"] - set(page_one))
    for wid in (page_one[-1], unseen[0]):
        run_id, epoch = population["runs"][wid]
        assert kit.finish(eid, wid, epoch, run_id) is None

    rest = store.list_workflows(status="running", limit=100, cursor=first["cursor"])
    page_two = [item["id"] for item in rest["items"]]

    assert rest["cursor"] is None
    assert not set(page_one) & set(page_two)
    assert set(page_two) == set(unseen) - {unseen[0]}


@pytest.mark.parametrize("limit", [0, -1])
def test_non_positive_limit_is_invalid(kit, limit):
    with pytest.raises(InvalidRequest):
        kit.store.list_workflows(limit=limit)


@pytest.mark.parametrize(
    "cursor",
    [
        "abc",  # bad base64 padding
        "%%%%",  # not base64 at all
        "!!!",
        "not-a-cursor",  # decodes, but to no listing key
        base64.urlsafe_b64encode(b"\x00\x01").decode(),
    ],
)
def test_malformed_cursor_is_invalid_request(kit, population, cursor):
    with pytest.raises(InvalidRequest):
        kit.store.list_workflows(limit=10, cursor=cursor)


def test_cursor_from_another_status_listing_is_invalid_request(kit, population):
    cursor = kit.store.list_workflows(status="running", limit=2)["cursor"]
    assert cursor is not None

    with pytest.raises(InvalidRequest):
        kit.store.list_workflows(status="completed", limit=2, cursor=cursor)


def test_listing_keeps_working_after_an_invalid_cursor(kit, population):
    with pytest.raises(InvalidRequest):
        kit.store.list_workflows(cursor="%%%%")

    assert set(kit.listed_ids()) == population["all"]
