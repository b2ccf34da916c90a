"""The entry point of a spawned shard process, and how its exit code tells a crash from a wait.

Its own piece because it is the one place that decides what an exit means to the supervisor:
a store that cannot be written or reached yet (``EXIT_UNWRITABLE``) is waited for, not counted
as a crash; the serving itself is ``_shard_process.ShardServer``'s job.
"""

from __future__ import annotations

import logging
import sys
from multiprocessing.connection import Connection

from ..errors import StorageError, StorageFull, WeftError
from ..store import is_read_only, is_unreachable
from ._config import ShardConfig, configure_logging
from ._shard_process import ShardServer

__all__ = ["EXIT_UNWRITABLE", "cannot_write", "shard_main"]

log = logging.getLogger("weft_actors.supervisor")

EXIT_UNWRITABLE = 5
"""The store could not be written or reached at start (read-only filesystem or server,
permissions, a full disk, a lost database): the supervisor starts the shard again a little
later, without counting a crash."""


def shard_main(config: ShardConfig, control: Connection) -> None:
    """Entry point of a spawned shard process."""
    configure_logging(config.log_level, config.log_json, f"shard-{config.slot}")
    try:
        import uvloop

        code = uvloop.run(ShardServer(config, control).serve())
    except (StorageError, StorageFull) as exc:
        if not cannot_write(exc):
            log.exception("shard %d crashed", config.slot)
            code = 1
        else:  # not a crash: one line, no traceback
            log.error("shard %d cannot start: %s", config.slot, exc)
            code = EXIT_UNWRITABLE
    except Exception:
        log.exception("shard %d crashed", config.slot)
        code = 1
    sys.exit(code)


def cannot_write(error: WeftError) -> bool:
    """The store refuses writes for now (a read-only filesystem or server, no permission, a
    full disk) or cannot be reached: a restart will fail the same way until an operator or
    time frees it, so it is waited for (``EXIT_UNWRITABLE``), not counted as a crash."""
    return isinstance(error, StorageFull) or is_read_only(error) or is_unreachable(error)
