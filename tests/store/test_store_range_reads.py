"""The range reads that replay and takeover use (``_reads.prefix_rows``, ``last_rows``) give
the same rows on both backends, as the transaction sees them: stored rows merged with its own
buffered writes, whether the rows were read on demand or named ahead (a ``Prefetch`` of
tails, ``warm_prefixes``), which on PostgreSQL answers them from memory.

The model is a sorted dict; each round writes and deletes at random inside one transaction
(rolled back) and compares every answer with it.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from weft_actors.store._reads import Prefetch, last_rows, prefix_end, prefix_rows, warm_prefixes

PREFIXES = [b"\x00\x02ab", b"\x00\x02ac", b"\x00\x03abc", b"\x00\x02b\xff"]
ROUNDS = 40


class Rollback(Exception):
    pass


def key_under(rng: random.Random, prefix: bytes) -> bytes:
    return prefix + rng.randrange(40).to_bytes(2, "big")


def model_rows(model: dict[bytes, bytes], low: bytes, high: bytes) -> list[tuple[bytes, bytes]]:
    return sorted((key, value) for key, value in model.items() if low <= key < high)


@pytest.mark.timeout(120)
def test_range_reads_match_a_model_with_buffered_writes(store: Any) -> None:
    rng = random.Random(20261202)
    db = store.dbs.ops
    stored = {key_under(rng, prefix): rng.randbytes(rng.randrange(1, 8)) for prefix in PREFIXES for _ in range(rng.randrange(0, 30))}
    store._write(lambda txn: [txn.put(key, value, db=db) for key, value in stored.items()])
    checked = 0
    for round_no in range(ROUNDS):
        prefetch = None
        if round_no % 2:  # half the rounds name tails ahead (PostgreSQL fetches them with the lock)
            prefetch = Prefetch()
            prefetch.tails[db] = (sorted((prefix, prefix_end(prefix)) for prefix in PREFIXES), rng.randrange(1, 6))
        answers: list[tuple[Any, Any]] = []

        def body(txn: Any) -> None:
            model = dict(stored)
            for step in range(rng.randrange(0, 25)):
                key = key_under(rng, rng.choice(PREFIXES))
                if rng.random() < 0.4:
                    txn.delete(key, db=db)
                    model.pop(key, None)
                else:
                    value = rng.randbytes(rng.randrange(1, 8))
                    txn.put(key, value, db=db)
                    model[key] = value
                if step == 3 and round_no % 4 == 2:
                    warm_prefixes(txn, db, PREFIXES[:2])  # read whole, after some writes
            for prefix in PREFIXES:
                answers.append((prefix_rows(txn, db, prefix), model_rows(model, prefix, prefix_end(prefix))))
                for _ in range(3):
                    limit = rng.randrange(1, 8)
                    low = prefix + (rng.randrange(0, 20).to_bytes(2, "big") if rng.random() < 0.3 else b"")
                    expected = model_rows(model, low, prefix_end(prefix))[::-1][:limit]
                    answers.append((last_rows(txn, db, low, prefix_end(prefix), limit), expected))
            raise Rollback

        with pytest.raises(Rollback):
            store._write(body, prefetch)
        for got, expected in answers:
            assert [(bytes(k), bytes(v)) for k, v in got] == expected
            checked += 1
    assert checked == ROUNDS * len(PREFIXES) * 4
    # Nothing of the rounds was committed.
    store._write(lambda txn: answers.append((prefix_rows(txn, db, PREFIXES[0]), None)))
    assert [(bytes(k), bytes(v)) for k, v in answers[-1][0]] == model_rows(stored, PREFIXES[0], prefix_end(PREFIXES[0]))
