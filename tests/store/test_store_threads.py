"""A store serves reads from several threads at once, beside its owner's writes: the
supervisor's ``/metrics`` and console threads read while its loop writes."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(60)


def test_reads_from_other_threads_beside_the_owners_writes(store, kit):
    eid = kit.engine()
    errors: list[BaseException] = []
    done = threading.Event()

    def read(fn: Any) -> None:
        try:
            while not done.is_set():
                fn()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    readers = [threading.Thread(target=read, args=(fn,), daemon=True) for fn in (store.engines, store.workflow_counts, lambda: store.list_workflows(limit=10))]
    for reader in readers:
        reader.start()
    try:
        started = [kit.start(eid) for _ in range(50)]
    finally:
        done.set()
        for reader in readers:
            reader.join(20)
    assert not any(reader.is_alive() for reader in readers), "a reader hung"
    assert errors == []
    assert {item["id"] for item in store.list_workflows(limit=100)["items"]} == {wid for wid, _, _ in started}
