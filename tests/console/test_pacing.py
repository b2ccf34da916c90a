"""``ReadPacer``: the console's store reads take turns, one at a time, and hold at most their
share of the time; a read that would wait too long is refused alone. Real threads, a fake clock."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from weft_actors.console._pacing import ReadPacer
from weft_actors.errors import Overloaded


class _Clock:
    """A fake monotonic clock; ``sleep`` advances it (the pacer's only way to wait)."""

    def __init__(self) -> None:
        self.now = 100.0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += max(0.0, seconds)


def test_reads_take_turns_one_at_a_time_and_hold_at_most_their_share():
    clock = _Clock()
    pacer = ReadPacer(share=0.2, max_wait=1000.0, overhead=0.002, monotonic=clock.monotonic, sleep=clock.sleep)
    turns: list[tuple[float, float]] = []
    inside = []

    def read() -> None:
        with pacer.turn():
            inside.append(1)
            assert len(inside) == 1  # nobody else reads meanwhile
            started = clock.monotonic()
            clock.sleep(0.010)  # the read takes 10 ms
            turns.append((started, clock.monotonic()))
            inside.pop()

    with ThreadPoolExecutor(6) as pool:
        for future in [pool.submit(read) for _ in range(30)]:
            future.result()

    turns.sort()
    assert len(turns) == 30 and pacer.reads == 30
    for (start, end), (next_start, _) in zip(turns, turns[1:]):
        assert next_start >= start + (end - start + 0.002) / 0.2 - 1e-9
    elapsed = turns[-1][1] - turns[0][0]
    assert pacer.busy == pytest.approx(0.3) and pacer.busy + 0.002 * 30 <= 0.2 * elapsed + 0.012 + 1e-9


def test_a_read_that_would_wait_too_long_is_refused_and_the_next_one_is_served():
    clock = _Clock()
    pacer = ReadPacer(share=0.01, max_wait=0.5, overhead=0.0, monotonic=clock.monotonic, sleep=clock.sleep)
    with pacer.turn():
        clock.sleep(0.1)  # the next turn comes 10 s after this one began

    with pytest.raises(Overloaded) as refused:
        with pacer.turn():
            pytest.fail("refused reads do not run")

    assert refused.value.code == "overloaded"
    clock.sleep(10.0)
    with pacer.turn():
        pass
    assert pacer.reads == 2


def test_a_share_outside_0_to_1_is_refused():
    with pytest.raises(ValueError):
        ReadPacer(share=0)
