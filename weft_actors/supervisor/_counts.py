"""The store's workflow counts as the supervisor's ``stats()`` reports them.

Both read the counts every status change keeps (one entry per group, no scan of the
workflows), so every scrape may read them fresh; a store briefly unreadable yields empty
lists and a warning, never a failed scrape.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["flow_counts", "workflow_counts"]

log = logging.getLogger("weft_actors.supervisor")


def workflow_counts(store: Any) -> list[dict[str, Any]]:
    """``[{"type", "status", "count"}]``: the store's workflows per type and status."""
    try:
        counts = store.workflow_counts()
    except Exception as exc:  # a read; the store may be briefly unreadable
        log.warning("cannot read the workflow counts: %s", exc)
        return []
    return [{"type": wf_type, "status": status, "count": count} for (status, wf_type), count in sorted(counts.items(), key=lambda item: (item[0][1], item[0][0]))]


def flow_counts(store: Any) -> list[dict[str, Any]]:
    """``[{"type", "running", "queued"}]`` of the types under flow control."""
    try:
        counts = store.flow_counts()
    except Exception as exc:
        log.warning("cannot read the flow-control counts: %s", exc)
        return []
    return [{"type": wf_type, **counts[wf_type]} for wf_type in sorted(counts)]
