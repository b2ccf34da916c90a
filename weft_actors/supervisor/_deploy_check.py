"""Does the code on disk still replay the running workflows? Asked before a rolling restart
replaces a shard.

A rolling restart starts each shard anew, and a new shard imports the app module anew: a
deploy is a rolling restart. A deploy that changed a workflow so its running runs no longer
replay would leave each of them stuck on the new shards, so before the roll and again before
each shard, the running workflows of each type (up to ``PER_TYPE`` of each) are replayed, as
``python -m weft_actors replay`` does, in a freshly spawned process: the supervisor's own
imports are the old code, and a replay must never run inside the supervisor (user code).
The first divergence stops the roll, naming the workflow and the op (the
``NonDeterminismError`` message says which op differs).
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["DeployCheck", "PER_TYPE", "MAX_CHECKED"]

log = logging.getLogger("weft_actors.supervisor")

PER_TYPE = 20
"""Running workflows replayed per workflow type: the most recently listed first pages."""
MAX_CHECKED = 2000
"""Running workflows listed at most per check (a bound on its time, not a correctness limit)."""
_PAGE = 500


def _check(data_dir: str, app_name: str) -> dict[str, Any]:
    """The check itself, in the spawned process: ``{"ok": True, "checked": n}``, or the
    first divergence ``{"ok": False, "id", "type", "divergence"}``."""
    from .._replay import replay_history
    from ..errors import WeftError
    from ..history import export_history
    from ..store import open_store

    app = importlib.import_module(app_name)
    store: Any = open_store(data_dir, readonly=True)
    try:
        per_type: dict[str, int] = {}
        listed = checked = 0
        cursor: str | None = None
        while listed < MAX_CHECKED:
            page = store.list_workflows("running", None, _PAGE, cursor)
            for item in page["items"]:
                listed += 1
                if per_type.get(item["type"], 0) >= PER_TYPE:
                    continue
                per_type[item["type"]] = per_type.get(item["type"], 0) + 1
                try:
                    report = replay_history(export_history(store, item["id"]), app, app_name=app_name)
                except WeftError as exc:  # gone since listed (finished, purged) is no divergence
                    if exc.code == "workflow_not_found":
                        continue
                    return {"ok": False, "id": item["id"], "type": item["type"], "divergence": f"{exc.code}: {exc}"}
                checked += 1
                if not report["ok"]:
                    return {"ok": False, "id": item["id"], "type": item["type"], "divergence": report.get("divergence")}
            cursor = page["cursor"]
            if cursor is None:
                break
        return {"ok": True, "checked": checked, "types": sorted(per_type)}
    finally:
        store.close()


def _child(conn: Connection, data_dir: str, app_name: str) -> None:
    try:
        outcome = _check(data_dir, app_name)
    except BaseException as exc:  # the app does not import, the store cannot be read: no roll
        outcome = {"ok": False, "id": None, "type": None, "divergence": f"the check failed: {type(exc).__name__}: {exc}"}
    conn.send(outcome)
    conn.close()


class DeployCheck:
    """One check running in its own process; ``poll()`` is its outcome once it has one."""

    def __init__(self, data_dir: str, app_name: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe(duplex=False)
        self._process = context.Process(target=_child, args=(child, data_dir, app_name), name="deploy-check", daemon=True)
        self._process.start()
        child.close()

    def poll(self) -> dict[str, Any] | None:
        """The outcome once the check ended (the process is reaped then), else None."""
        try:
            if self._conn.poll():
                outcome: dict[str, Any] = self._conn.recv()
                self.close()
                return outcome
        except (EOFError, OSError):
            pass
        if self._process.is_alive():
            return None
        self.close()
        return {"ok": False, "id": None, "type": None, "divergence": f"the check process ended with code {self._process.exitcode} and no answer"}

    def close(self) -> None:
        """Stop it if it still runs, and reap it."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(5)
        self._conn.close()
