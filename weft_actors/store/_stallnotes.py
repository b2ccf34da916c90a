"""Where an engine's watchdog leaves its stall note: a file beside its lock file on one
machine, a row of the database on PostgreSQL (``_pg._notes``), where takers on every host
read it in their takeover transaction (``_blame.stall_note_key``).

Kept apart from ``_blame``: the PostgreSQL notes import ``_blame``, so the choice between the
two lives above both.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._quarantine import remove_stall_note, stall_note_path, write_stall_note

__all__ = ["StallNotes", "FileStallNotes", "stall_notes"]


class StallNotes(Protocol):
    """Where an engine's watchdog leaves its stall note: ``write`` raises ``OSError`` if
    refused; ``clear`` once the engine has heartbeated again (the stall blames nobody)."""

    def write(self, note: dict[str, Any]) -> None: ...

    def clear(self) -> None: ...


class FileStallNotes:
    """A stall note as a file of the data directory (one machine: LMDB)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, note: dict[str, Any]) -> None:
        write_stall_note(self.path, note)

    def clear(self) -> None:
        remove_stall_note(self.path)


def stall_notes(store: Any, engine_id: str) -> StallNotes:
    """Where ``engine_id``'s stall note goes: the database for a store on PostgreSQL (takers
    on every host read it), else a file beside the engine's lock file."""
    url = getattr(store, "url", None)
    if isinstance(url, str):
        from ._pg._notes import PgStallNotes

        return PgStallNotes(url, engine_id)
    return FileStallNotes(stall_note_path(store.path, engine_id))
