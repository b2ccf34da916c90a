"""Stall notes in the database, so that a taker on any host can read them.

A stalled engine's loop cannot write (it is the thing that is stuck), so its watchdog thread
writes the note on a short connection of its own, outside the store's write lock: one row of
``meta`` (``_blame.stall_note_key``), which the takeover transaction reads like any key.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from ...codec import pack_record
from .._blame import stall_note_key
from .._keys import engine_key
from ._schema import table_of

__all__ = ["PgStallNotes"]

log = logging.getLogger("weft_actors.store")

_TIMEOUT = 5


class PgStallNotes:
    """The stall note of one engine, as a row of the store. ``write`` is called from the
    watchdog's thread; ``clear`` from the loop, so it deletes from a thread of its own."""

    def __init__(self, url: str, engine_id: str) -> None:
        self._url = url
        self._key = stall_note_key(engine_key(engine_id))
        self._table = table_of("meta")

    def write(self, note: dict[str, Any]) -> None:
        """Raises ``OSError`` if the database cannot take it (as a refused file would)."""
        try:
            with psycopg.connect(self._url, autocommit=True, connect_timeout=_TIMEOUT, application_name="weft_actors") as conn:
                conn.execute(
                    f"INSERT INTO {self._table} (k, v) VALUES (%b, %b) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                    (self._key, pack_record(note)),
                )
        except psycopg.Error as exc:
            raise OSError(f"cannot write the stall note to the database: {exc}") from exc

    def clear(self) -> None:
        threading.Thread(target=self._delete, name="weft-stall-note", daemon=True).start()

    def _delete(self) -> None:
        try:
            with psycopg.connect(self._url, autocommit=True, connect_timeout=_TIMEOUT, application_name="weft_actors") as conn:
                conn.execute(f"DELETE FROM {self._table} WHERE k = %b", (self._key,))
        except psycopg.Error as exc:
            log.warning("could not remove the stall note of an engine that heartbeats again: %s", exc)
