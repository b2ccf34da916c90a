"""Opening an engine: the parts that need the store and the running loop, built and wired.

Its own piece because ``Engine.__init__`` wires what needs neither and ``open`` adds the rest
once it has opened the store, in one fixed order (registration, the committer, timers and
activities, the driver, maintenance, then the background tasks); keeping that order in one
function keeps it readable apart from the facade. It knows the engine only by its runtime
(``ActorHost``) and two callbacks.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

from .. import _tracing
from ..store import stall_notes
from ._activities import ActivityRunner
from ._committer import GroupCommitter
from ._driving import Driver
from ._lifecycle import register, tune_gc, warn_on_type_mismatch
from ._maintenance import Maintenance
from ._timers import TimerService
from ._watchdog import LoopWatchdog, open_slot

if TYPE_CHECKING:
    from ..store import LmdbStore
    from ._hosting import ActorHost
    from ._options import EngineOptions

__all__ = ["open_runtime"]


def open_runtime(
    host: ActorHost,
    store: LmdbStore,
    options: EngineOptions,
    engine_id: str,
    slot: int | None,
    app_types: list[str],
    warn_type_mismatch: bool,
    depose: Callable[[str], None],
    hint_many: Callable[[list[tuple[str | None, str]]], None],
) -> None:
    """Register ``engine_id`` on ``store``, just opened as ``host.store`` (``register`` refuses,
    writing nothing, on a mismatch), build the parts that need the store and the loop, run
    the first maintenance pass and, with ``options.background``, start the background tasks.
    ``depose`` is how a lost lease reaches the engine; ``hint_many`` takes a store's hints."""
    loop = asyncio.get_running_loop()
    register(store, options, engine_id, slot, app_types)
    host.clock = store.clock  # on PostgreSQL, leases go by the server's clock
    listen = getattr(store, "listen", None)  # PostgreSQL: hints from other hosts' engines
    if listen is not None:
        listen(hint_many)
    if warn_type_mismatch:
        warn_on_type_mismatch(store, engine_id, app_types)
    committer = host.committer = GroupCommitter(store, engine_id, loop, on_unknown=host.commit_retry.may_have_landed)
    committer.on_deposed = lambda error: depose(str(error))
    host.timers = TimerService(loop, host.clock)
    host.activities = ActivityRunner(loop, options.max_activity_threads, host.max_inflight_activities)
    host.activities.use_permits(committer, host.timers, host.clock)  # activity rate and concurrency limits
    host.driver = Driver(host, options.background)
    host.maintenance = Maintenance(host)
    committer.on_promoted = host.maintenance.reclaimer.fire_promoted
    host.state = "running"
    _tracing.tracer(configure=True)  # spans on if the application set a tracer provider
    if options.tune_gc:
        tune_gc()
    host.maintenance.run_pass(heartbeat=False)
    if options.background:
        host.maintenance.start(loop)
        host.activities.on_loop = on_loop = open_slot(store.path, engine_id, host.stall_threshold)
        host.watchdog = LoopWatchdog(loop, host.stall_threshold, name=engine_id[:8], slot=on_loop, notes=stall_notes(store, engine_id), waiting=store.waiting_on_store)
        host.watchdog.start()
