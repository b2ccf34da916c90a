"""The callers of one engine waiting for a workflow to end, or for an update's answer.

A waiter is a future resolved with the ending's record, or with None to make its caller read
the store again (a drop, a done hint, a poll interval). Waiting on a workflow held elsewhere
declares interest in its done hints (``on_done_interest``) until the last such waiter goes, so
a hint subscriber takes only the done hints somebody here waits for.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

if TYPE_CHECKING:
    from ..errors import WeftError

__all__ = ["CallReply", "Waiters", "resolve"]


def resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class CallReply(Protocol):
    """A waiting call's reply, given by the commit that settles it (``_call_replies``)."""

    sent: bool

    def ended(self, wid: str, outcome: dict[str, Any]) -> None:
        """The run of ``wid`` ended with ``outcome`` (``status``, ``result``, ``error``)."""

    def answered(self, wid: str, name: str, answer: dict[str, Any]) -> None:
        """Update ``name`` of ``wid`` was answered (``ok`` or ``err``, as stored)."""


class _Evicted(Protocol):
    @property
    def evicted(self) -> Mapping[str, object]: ...


class Waiters:
    """``by_wid``: wid -> futures waiting for its end; ``updates``: (wid, request id) ->
    futures waiting for that update's answer (each also waits in ``by_wid``, so a finish, a
    drop or a stop wakes it too). ``endings`` and ``answers``: the same keys -> the replies
    those callers hand over to be sent in the settling commit's pass (``_call_replies``),
    while they wait on a run held here."""

    __slots__ = ("by_wid", "updates", "endings", "answers", "_watched", "_actors", "_eviction", "_on_done_interest")

    def __init__(self, actors: Mapping[str, object], eviction: _Evicted, on_done_interest: Callable[[str, bool], None] | None) -> None:
        self.by_wid: dict[str, list[asyncio.Future[Any]]] = {}
        self.updates: dict[tuple[str, str], list[asyncio.Future[Any]]] = {}
        self.endings: dict[str, list[CallReply]] = {}
        self.answers: dict[tuple[str, str], list[CallReply]] = {}
        self._watched: set[str] = set()
        self._actors = actors
        self._eviction = eviction
        self._on_done_interest = on_done_interest

    def add(self, wid: str, future: asyncio.Future[Any]) -> None:
        """``future`` waits for ``wid`` to end (or for news of it): resolved by a local finish,
        drop or stop, or by a done hint. Waiting on a workflow held elsewhere declares interest
        in its done hints (``on_done_interest``) until the last such waiter goes."""
        self.by_wid.setdefault(wid, []).append(future)
        hook = self._on_done_interest
        if hook is not None and wid not in self._watched and wid not in self._actors and wid not in self._eviction.evicted:
            self._watched.add(wid)
            hook(wid, True)

    def add_held(self, wid: str, future: asyncio.Future[Any]) -> None:
        """``add`` for a run this engine is about to hold: called in its start's commit pass,
        before its actor is made (``after_replies``), so no done interest is declared (it
        would be for a run held here). A run that ends up not held here is woken as any other:
        a drop or a stop resolves ``future``."""
        self.by_wid.setdefault(wid, []).append(future)

    def remove(self, wid: str, future: asyncio.Future[Any]) -> None:
        waiters = self.by_wid.get(wid)  # ``_forget``, inlined: once per ``execute``
        if waiters is not None and future in waiters:
            waiters.remove(future)
            if not waiters:
                del self.by_wid[wid]
        if wid in self._watched and wid not in self.by_wid:
            self._watched.discard(wid)
            self._on_done_interest(wid, False)  # type: ignore[misc]

    def wake(self, wid: str) -> None:
        """Callers waiting on ``wid``'s result look again."""
        for future in self.by_wid.get(wid, ()):
            resolve(future, None)

    def add_reply(self, table: dict[Any, list[CallReply]], key: Any, reply: CallReply) -> None:
        """``reply`` is given by the commit that settles ``key`` (``endings`` or ``answers``)."""
        table.setdefault(key, []).append(reply)

    def remove_reply(self, table: dict[Any, list[CallReply]], key: Any, reply: CallReply) -> None:
        _forget(table, key, reply)

    def add_update(self, key: tuple[str, str], future: asyncio.Future[Any]) -> None:
        self.updates.setdefault(key, []).append(future)

    def remove_update(self, key: tuple[str, str], future: asyncio.Future[Any]) -> None:
        _forget(self.updates, key, future)

    def update_answered(self, wid: str, request_id: str) -> None:
        for future in self.updates.get((wid, request_id), ()):
            resolve(future, None)

    def update_hinted(self, wid: str) -> None:
        """A hint about ``wid``: callers waiting here for its updates look at the store now
        instead of at their next poll."""
        for (hinted, _), futures in list(self.updates.items()):
            if hinted == wid:
                for future in futures:
                    resolve(future, None)

    def fail_all(self, error: WeftError) -> None:
        """The engine stopped: every caller still waiting gets ``error``."""
        for futures in self.by_wid.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)
        self.by_wid.clear()


def _forget(table: dict[Any, list[Any]], key: Any, future: Any) -> None:
    futures = table.get(key)
    if futures is not None and future in futures:
        futures.remove(future)
        if not futures:
            del table[key]
