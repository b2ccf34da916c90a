"""Batches of starts and executes (``start_many``, ``execute_many``) without I/O.

Both clients pipeline a batch on one socket: N requests out, their replies matched by request
id as they land, in any order. What a batch is does not depend on how frames move, so it
lives here once: each item becomes its ``Call`` as the single call builds it (a bad item lands
at once with its own error and is never sent), at most ``window`` requests are out at a time,
each reply is read as the single call reads it (``start``'s handle, ``execute``'s result, or,
for an execute whose wait ran out, the next ``result`` request for that item), and a request
without a reply within the client's timeout lands ``ServerUnavailable``, as its single call
would raise. One item's failure never touches another's.
"""

from __future__ import annotations

import collections
import heapq
import time
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from .._checks import check_seconds
from ..errors import InvalidRequest
from . import _calls
from ._calls import Call
from ._request_core import unavailable

__all__ = ["DEFAULT_WINDOW", "Batch", "Landed", "check_window", "specs"]

DEFAULT_WINDOW = 1000
"""Requests of one batch out at a time: the front door's own bound on the starts one shard
holds is of that order, and a deeper pipeline only queues in the sockets."""


class Landed(NamedTuple):
    """One item of a batch, answered: its ``position`` in the batch (0 for the first), and its ``value`` (a handle
    for ``start_many``, the workflow's result for ``execute_many``) or its ``error`` (the
    exception its single call would have raised)."""

    position: int
    value: Any = None
    error: BaseException | None = None

    def result(self) -> Any:
        """``value``, or raise ``error``."""
        if self.error is not None:
            raise self.error
        return self.value


def check_window(window: int) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidRequest(f"window must be a positive integer, not {window!r}")
    return window


def specs(starts: Iterable[Any]) -> Iterator[tuple[int, Any, tuple[Any, ...], dict[str, Any]] | Landed]:
    """Each item of ``starts`` as ``(index, workflow, args, options)``, or a ``Landed`` error
    for one that is not ``(workflow, args)`` or ``(workflow, args, options)``."""
    for index, spec in enumerate(starts):
        if isinstance(spec, (tuple, list)) and len(spec) in (2, 3):
            args = spec[1]
            options = spec[2] if len(spec) == 3 else {}
            if isinstance(args, (tuple, list)) and isinstance(options, dict):
                yield index, spec[0], tuple(args), options
                continue
        yield Landed(index, error=InvalidRequest(f"a batch item is (workflow, args) or (workflow, args, options), not {spec!r}"))


class _Item:
    """One item on its way: the request it is at now (``call``: its start or execute, then
    ``result`` requests while an execute's workflow runs) and, for an execute, its deadline."""

    __slots__ = ("index", "call", "deadline", "wid")

    def __init__(self, index: int, call: Call) -> None:
        self.index = index
        self.call = call
        self.deadline: float | None = None
        self.wid: str | None = None


class Batch:
    """One batch's items: those to send again (``todo``; the rest come from ``starts`` as
    they go), those out (request id -> item), those
    answered and not handed to the caller yet (``landed``). The transport sends what
    ``frames`` gives, hands each reply to ``answer``, calls ``expire`` when a deadline may
    have passed, and yields ``landed``.

    ``make_handle(wid, run_id, trace)`` makes a start's handle; ``timeout`` is
    ``execute_many``'s (None for starts: a start has no result to wait for)."""

    def __init__(self, starts: Iterable[Any], execute: bool, timeout: float | None, window: int, budget: float, endpoint: str, make_handle: Callable[[str, str | None, str | None], Any]) -> None:
        self.window = check_window(window)
        self.execute = execute
        self.op = "execute" if execute else "start"
        self.timeout = None if timeout is None else check_seconds(timeout, "timeout")
        self.budget = budget
        self.endpoint = endpoint
        self.make_handle = make_handle
        self.todo: collections.deque[_Item] = collections.deque()
        self.out: dict[str, _Item] = {}
        self.landed: collections.deque[Landed] = collections.deque()
        self._deadlines: list[tuple[float, str]] = []
        self._wait = _calls.MAX_RESULT_WAIT if self.timeout is None else self.timeout
        self._specs = specs(starts)
        self.sent_any = False
        """Whether a request of this batch went out yet (``_burst``)."""
        self._more = True
        """Items not taken from ``starts`` yet: each is built as it goes out, so the first
        requests leave at once rather than after the whole batch was encoded."""

    def unfinished(self) -> bool:
        return bool(self.todo or self.out or self._more)

    def _next_item(self) -> _Item | None:
        """The next item to send: one sent again or asking again first, else the next of
        ``starts`` that builds (those that do not land their error); None when none is left."""
        if self.todo:
            return self.todo.popleft()
        for spec in self._specs:
            if isinstance(spec, Landed):
                self.landed.append(spec)
                continue
            index, workflow, args, options = spec
            try:
                call = _calls.execute_call(workflow, args, self._wait, **options) if self.execute else _calls.start_call(workflow, args, **options)
            except Exception as exc:  # the item's own error, as its single call raises it
                self.landed.append(Landed(index, error=exc))
                continue
            return _Item(index, call)
        self._more = False
        return None

    def frames(self, next_id: Callable[[], str]) -> Iterator[tuple[str, bytes]]:
        """``(request id, frame)`` of the next items to send while fewer than ``window`` are
        out; the transport sends each before taking the next, and calls ``unsent`` for one
        that finds the socket full. An item whose frame cannot be built lands its error."""
        now = time.monotonic()
        while len(self.out) < self.window:
            item = self._next_item()
            if item is None:
                return
            request_id = next_id()
            try:
                frame = _calls.frame(request_id, item.call)
            except Exception as exc:  # too large, or not text where text must be
                self.landed.append(Landed(item.index, error=exc))
                continue
            if item.deadline is None and self.timeout is not None and self.execute:
                item.deadline = now + self.timeout
            self.out[request_id] = item
            heapq.heappush(self._deadlines, (now + self.budget + item.call.wait, request_id))
            yield request_id, frame

    def unsent(self, request_id: str) -> None:
        """The frame of ``request_id`` could not be sent now: it goes first next time."""
        item = self.out.pop(request_id)
        self.todo.appendleft(item)

    def answer(self, request_id: Any, reply: dict[str, Any]) -> None:
        """The reply to ``request_id``: its item lands, or (an execute not ended yet) asks
        again with ``result``. A reply to nothing out here is dropped."""
        item = self.out.pop(request_id, None)
        if item is None:
            return
        try:
            ok = _calls.unwrap(item.call, reply)
            if not self.execute:
                wid, run_id = ok
                self.landed.append(Landed(item.index, self.make_handle(wid, run_id, item.call.fields.get("traceparent"))))
                return
            done, value = _calls.result_value(ok)
            if done:
                self.landed.append(Landed(item.index, value))
                return
            self._ask_again(item, ok)
        except Exception as exc:  # the item's own error, as its single call raises it
            self.landed.append(Landed(item.index, error=exc))

    def _ask_again(self, item: _Item, ok: Any) -> None:
        """An execute's workflow had not ended within the wait: long-poll ``result`` as the
        single ``execute`` does, until ``timeout``."""
        now = time.monotonic()
        if item.call.op == "execute":
            item.wid = ok["id"]
        elif item.deadline is not None and now >= item.deadline:
            raise TimeoutError(f"workflow {item.wid!r} did not finish within {self.timeout}s")
        remaining = _calls.MAX_RESULT_WAIT if item.deadline is None else max(0.0, item.deadline - now)
        assert item.wid is not None
        item.call = _calls.result_call(item.wid, remaining)
        self.todo.append(item)

    def fail_out(self, error: BaseException) -> None:
        """Every request out will never be answered: each of their items lands ``error``."""
        out, self.out = self.out, {}
        for item in out.values():
            self.landed.append(Landed(item.index, error=error))

    def fail_all(self, error: BaseException) -> None:
        """The batch cannot go on (the client was closed): every item not landed lands ``error``."""
        self.fail_out(error)
        while self.todo:
            self.landed.append(Landed(self.todo.popleft().index, error=error))
        for spec in self._specs:
            self.landed.append(spec if isinstance(spec, Landed) else Landed(spec[0], error=error))
        self._more = False

    def next_deadline(self) -> float | None:
        """The earliest moment a request out runs out of time (monotonic), if one is out."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][1] not in self.out:
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else None

    def expire(self) -> list[str]:
        """Requests out past their budget land ``ServerUnavailable``, as their single call
        raises it (their reply, should it come later, is dropped); returns their ids."""
        now = time.monotonic()
        deadlines = self._deadlines
        expired = []
        while deadlines and deadlines[0][0] <= now:
            _, request_id = heapq.heappop(deadlines)
            item = self.out.pop(request_id, None)
            if item is not None:
                expired.append(request_id)
                budget = self.budget + item.call.wait
                self.landed.append(Landed(item.index, error=unavailable(self.endpoint, item.call.op, f"no reply within {budget:.3g}s")))
        return expired
