"""The console's memo-filtered list on a real LMDB store: newest first through the memo index
with exact counts, and past ``MEMO_BUDGET`` ids read from the ``recent`` index instead, each
page still bounded and the cursor still going on where the last page ended."""

from __future__ import annotations

import os
import uuid

import pytest

from weft_actors.codec import encode, encode_args
from weft_actors.console import _data, _memo_page
from weft_actors.store import CreateWorkflow, LmdbStore
from weft_actors.testing import FakeClock


@pytest.fixture
def store(tmp_path):
    clock = FakeClock()
    store = LmdbStore(str(tmp_path / "db"), clock=clock)
    engine = uuid.uuid4().hex
    store.register_engine(engine, heartbeat=0.5, ttl=3.0, mode="workflow-lease")
    for i in range(30):  # one a millisecond apart: w-29 is the newest
        clock.advance(0.01)
        customer = "acme" if i % 3 else "bolt"
        memo = encode({"customer": customer, "n": i})
        store.apply(engine, [CreateWorkflow(f"w-{i:02d}", "order" if i % 2 else "refund", encode_args(()), os.urandom(16).hex(), memo=memo)])
    yield store
    store.close()


def _pages(store, **params):
    pages, cursor = [], None
    while True:
        page = _data.workflows(store, _data.list_query({**params, **({"cursor": cursor} if cursor else {})}))
        pages.append(page)
        cursor = page["cursor"]
        if cursor is None:
            return pages


ACME = [f"w-{i:02d}" for i in reversed(range(30)) if i % 3]


def test_newest_first_from_the_index_with_exact_counts(store):
    pages = _pages(store, memo="customer=acme", limit="7")
    assert [item["id"] for page in pages for item in page["items"]] == ACME
    assert pages[0]["counts_exact"] and pages[0]["counts"]["running"] == 20 and pages[0]["total"] == 20
    assert pages[0]["scanned"] == 20  # the index entries of customer=acme, nothing else
    only = _pages(store, memo="customer=acme, n=4", type="refund")
    assert [item["id"] for page in only for item in page["items"]] == ["w-04"]


def test_past_the_budget_pages_come_from_the_recent_index(store, monkeypatch):
    monkeypatch.setattr(_memo_page, "MEMO_BUDGET", 5)
    pages = _pages(store, memo="customer=acme", limit="7")
    assert [item["id"] for page in pages for item in page["items"]] == ACME
    assert [len(page["items"]) for page in pages] == [7, 7, 6]
    assert not pages[0]["counts_exact"]
    refunds = _pages(store, memo="customer=acme", type="refund", status="running")
    assert [item["id"] for page in refunds for item in page["items"]] == [wid for wid in ACME if int(wid[2:]) % 2 == 0]
