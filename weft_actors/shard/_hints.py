"""Hints: news that a workflow changed (or a peer died), heard from another engine or host,
that makes this engine look at the store now instead of at its next heartbeat.

The engine holds one ``Hints`` and delegates ``hint`` and ``hint_many`` to it; it knows the
engine's runtime only by ``HintHost``. Hints only make things sooner: without any, the
maintenance pass still runs every heartbeat and waiting callers still poll.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from ._waiters import resolve

if TYPE_CHECKING:
    from ._committer import GroupCommitter
    from ._waiters import Waiters

__all__ = ["HANDED_OFF", "HintHost", "Hints"]

HANDED_OFF = "handed-off"
"""The hint kind that tells an engine a peer handed it a workflow (``Engine.adopt``)."""


class _Hinted(Protocol):
    def hint(self) -> None: ...


class HintHost(Protocol):
    """What hints need of the engine: whether it runs, its loop (through the committer), the
    maintenance pass (a peer died), the waiters to wake, and a look at a held workflow."""

    @property
    def state(self) -> str: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def maintenance(self) -> _Hinted: ...

    @property
    def waiters(self) -> Waiters: ...

    @property
    def orphans(self) -> set[str]: ...

    def look_at(self, wid: str) -> bool: ...


class Hints:
    __slots__ = ("_host",)

    def __init__(self, host: HintHost) -> None:
        self._host = host

    def hint(self, workflow_id: str | None, kind: str) -> None:
        """``Engine.hint``: callable from any thread."""
        host = self._host
        if host.state != "running":
            return
        if workflow_id is None:
            host.maintenance.hint()
            return
        loop = host.committer.loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._hinted(workflow_id, kind)
        else:
            loop.call_soon_threadsafe(self._hinted, workflow_id, kind)

    def hint_many(self, hints: list[tuple[str | None, str]]) -> None:
        """``Engine.hint_many``: handed to the loop once, from any thread."""
        host = self._host
        if host.state == "running":
            try:
                host.committer.loop.call_soon_threadsafe(self._hinted_many, hints)
            except RuntimeError:  # the loop closed under us: nobody here to hint
                pass

    def _hinted_many(self, hints: list[tuple[str | None, str]]) -> None:
        host = self._host
        if host.state != "running":
            return
        waiters = host.waiters
        for workflow_id, kind in hints:
            if workflow_id is None:
                host.maintenance.hint()
            elif kind == "workflow-done":
                if workflow_id in waiters.by_wid or waiters.updates:
                    self._hinted(workflow_id, kind)
            else:
                self._hinted(workflow_id, kind)

    def _hinted(self, workflow_id: str, kind: str) -> None:
        host = self._host
        if host.state != "running":
            return
        waiters = host.waiters
        if kind == "workflow-done":
            for future in tuple(waiters.by_wid.get(workflow_id, ())):
                resolve(future, None)  # result() reads the store again
        elif kind == HANDED_OFF:
            # Handed to this engine by a draining peer (``_handoff``): the reclaim pass, run
            # now, drives each orphan it finds held here at its epoch (``_retry_orphans``).
            host.orphans.add(workflow_id)
            host.maintenance.hint()
        else:
            host.look_at(workflow_id)
        if waiters.updates:  # an owner elsewhere may have answered
            waiters.update_hinted(workflow_id)
