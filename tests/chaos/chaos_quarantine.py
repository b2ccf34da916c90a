"""The chaos harness's watch on quarantine, as a mixin of ``ChaosRun``: no workflow may be
quarantined that the fault injector did not make poison.

A quarantine parks a workflow until an operator lifts it, so an innocent one quarantined by a
fault (a shard killed, a database blip, a stall charged to the wrong workflow) is an outage of
that workflow, even if it is lifted later: it is a violation the moment it is seen, not only
if it is still parked at the end. The only poison is the injector's ``poisoned`` workflow,
whose id starts with ``POISON_PREFIX``. Sampled once a second through the front door; a
sample the service cannot answer (a fault under way) is simply skipped.
"""

from __future__ import annotations

import threading
from typing import Any

from weft_actors import Client
from weft_actors.errors import WeftError

__all__ = ["QuarantineWatchMixin", "POISON_PREFIX", "innocents"]

POISON_PREFIX = "poison-"
"""Ids of the injector's poison workflows (``IsolationMixin._poison``)."""
SAMPLE_EVERY = 1.0


def innocents(items: list[dict[str, Any]]) -> list[str]:
    """Ids among listed quarantined workflows that the injector did not make poison."""
    return [item["id"] for item in items if not str(item["id"]).startswith(POISON_PREFIX)]


class QuarantineWatchMixin:
    """Needs from ``ChaosRun``: ``sup``, ``stop_load``, ``request_timeout``, ``violation``
    and ``count``."""

    sup: Any
    stop_load: threading.Event
    request_timeout: float

    def violation(self, text: str) -> None:
        raise NotImplementedError

    def count(self, name: str, n: int = 1) -> None:
        raise NotImplementedError

    def _watch_quarantine(self) -> None:
        reported: set[str] = set()
        client: Client | None = None
        try:
            while not self.stop_load.wait(SAMPLE_EVERY):
                if client is None:
                    client = Client(self.sup.endpoint, timeout=self.request_timeout)
                try:
                    page = client.list(status="quarantined", limit=100)
                except WeftError:
                    client.close()  # a fault under way; a fresh socket for the next sample
                    client = None
                    continue
                self.count("quarantine_samples")
                for wid in innocents(page["items"]):
                    if wid not in reported:
                        reported.add(wid)
                        self.count("innocents_quarantined")
                        self.violation(f"{wid}: quarantined, though the injector did not make it poison")
        finally:
            if client is not None:
                client.close()

