"""The supervisor: spawns shard processes, watches them, restarts the dead, drains on signal.

It owns the client front door and the hint proxy, and opens the store itself to mark a reaped
shard's engine dead at once (its process has exited, so it can never write again) and to see
which shards stopped heartbeating: a hung shard is killed and restarted (``_liveness``).
This module is the process lifecycle; its other concerns are parts it holds or calls: each
shard slot's record (``_slot``), the live engines the routing asks (``_live``), the private
socket directory (``_ipc``), the store's counts that ``stats()`` reports (``_counts``) and
what each shard it spawns is told (``_shard_settings``).
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import zmq

from .._ratelimit import RateLimitedLog
from ..bus import FrontDoor, HintProxy, RoutingTable
from ..store import LmdbStore, open_store
from ._config import SupervisorConfig
from ._console import check_http_bind, start_console
from ._curve import check_bind, server_keys, start_authenticator
from ._admin import ShardsAdmin
from ._drain_watch import DrainWatch
from ._handoffs import Handoffs
from ._app_types import TypeMismatchWatch
from ._counts import flow_counts, workflow_counts
from ._direct_socket import direct_bind
from ._ipc import make_ipc_dir, remove_ipc_dir
from ._ipc import remove_stale_ipc_dirs as _remove_stale_ipc_dirs  # noqa: F401 - its old name, kept importable
from ._live import LiveEngines, live_ids
from ._liveness import DeathRecorder, judge_sparing_refusals, lock_holders
from ._metrics import MetricsServer, render
from ._roll import Roll, hangup_handler
from ._shard_entry import EXIT_UNWRITABLE, shard_main
from ._shard_settings import shard_config
from ._quiet import quiet_before_stop
from ._slot import ShardSlot

__all__ = ["Supervisor", "EXIT_OK", "EXIT_STARTUP", "EXIT_RESTART_INTENSITY"]

log = logging.getLogger("weft_actors.supervisor")
_UNWRITABLE_LOG = RateLimitedLog(log, interval=30.0)

UNWRITABLE_RETRY = 2.0
"""Seconds between two starts of a shard refused because the store was not writable."""

EXIT_OK = 0
EXIT_STARTUP = 1
EXIT_RESTART_INTENSITY = 3


class Supervisor:
    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self.slots = [ShardSlot(i) for i in range(config.shards)]
        self.started = time.time()
        self.restarts = 0
        self.hung_kills = 0
        self._restart_times: collections.deque[float] = collections.deque()
        self._mp = multiprocessing.get_context("spawn")
        self._stop_reason: str | None = None
        self._next_hung_check = 0.0
        self._refused_at = 0.0
        """When the store last refused writes or could not be read (lease clock; ``_kill_hung``)."""
        self.type_watch = TypeMismatchWatch(config.app)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.handoffs = Handoffs(self._wake_w, config.handoff_grace)
        self.drain_watch = DrainWatch()
        self.roll = Roll(self._wake_w, config.data_dir, config.app)  # ``shards restart``, SIGHUP

    # -- lifecycle ------------------------------------------------------------------------

    def run(self) -> int:
        config = self.config
        check_bind(config.bind, bool(config.curve_secret_key), config.insecure_bind)
        if config.http is not None:
            check_http_bind(config)
        self.store = cast(LmdbStore, open_store(config.data_dir))  # a PgStore has its methods
        self.context = zmq.Context()
        self.authenticator = None
        self.keys = None
        curve = None
        if config.curve_secret_key:
            curve = server_keys(config.curve_secret_key)
            self.authenticator, self.keys = start_authenticator(
                self.context, config.curve_authorized_keys, config.curve_readonly_keys
            )
        self._ipc_dir = make_ipc_dir()  # the front door's shard side and the hint bus
        ipc = None if self._ipc_dir is None else f"ipc://{self._ipc_dir}"
        self.hints = HintProxy(self.context, None if ipc is None else (f"{ipc}/hints-in", f"{ipc}/hints-out"))
        self.hints.start()
        self.deaths = DeathRecorder(self.store, self.context, self.hints.publish_endpoint)
        self.deaths.start()
        self.live_engines = LiveEngines(self.store, config.heartbeat)
        self.routing = RoutingTable(self.live_engines.owner_of, live=self.live_engines, by_owner=config.routing == "owner")
        self.frontdoor = FrontDoor(
            self.context,
            config.bind,
            self.routing,
            self.stats,
            max_frame=config.payload_limit + 64 * 1024,
            curve_secret_key=curve[0] if curve else None,
            curve_public_key=curve[1] if curve else None,
            backend_bind=None if ipc is None else f"{ipc}/shards",
            ready_timeout=config.ready_timeout,
            keys=self.keys,
            max_shard_requests=config.max_queued_requests,
            max_shard_starts=config.max_queued_starts,
            intake_budget=config.max_intake_bytes,
        )
        self.frontdoor.admin = ShardsAdmin(self.slots, self.handoffs.draining, self.roll)
        try:
            self.frontdoor.start()
        except zmq.ZMQError as exc:
            log.error("cannot bind the front door to %s: %s", config.bind, exc)
            self._close()
            return EXIT_STARTUP
        self.console = self.console_client = None
        if config.http is not None:
            try:
                self.console, self.console_client = start_console(
                    config,
                    store=self.store,
                    stats=self.stats,
                    metrics=lambda: render(self.stats()),
                    curve_public_key=curve[1] if curve else None,
                    keys=self.keys,
                )
            except (OSError, ValueError) as exc:
                log.error("cannot start the web console on %s: %s", config.http, exc)
                self._close()
                return EXIT_STARTUP
        # The console serves /metrics too: --metrics-port naming its port is that same server.
        port = config.metrics_port
        self.metrics = MetricsServer(port, self.stats) if port and (self.console is None or port != self.console.port) else None
        self._install_signals()
        for slot in self.slots:
            self._spawn(slot)
        code = self._watch()
        self._close()
        return code

    def _install_signals(self) -> None:
        def request_stop(signum: int, frame: Any) -> None:
            self._stop_reason = signal.Signals(signum).name
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.handoffs.request())  # ``_handoffs``
        signal.signal(signal.SIGHUP, hangup_handler(self.keys, self.roll))  # ``_roll``

    def _spawn(self, slot: ShardSlot) -> None:
        config = self.config
        parent, child = self._mp.Pipe()
        endpoints = (self.frontdoor.backend_endpoint, self.hints.publish_endpoint, self.hints.subscribe_endpoint)
        shard = shard_config(config, slot.index, *endpoints, direct_bind(config.bind, self.frontdoor.curve))
        process = self._mp.Process(target=shard_main, args=(shard, child), name=f"shard-{slot.index}")
        process.start()
        child.close()
        slot.process, slot.control, slot.ready = process, parent, False
        slot.killed = False
        slot.engine_id = None
        slot.pid = process.pid
        slot.started_at = time.monotonic()
        log.info("shard %d started (pid %d)", slot.index, process.pid)

    def _watch(self) -> int:
        announced = False
        while True:
            if self._stop_reason is not None:
                log.info("%s received: draining", self._stop_reason)
                self._drain()
                return EXIT_OK
            waitables: list[Any] = [self._wake_r]
            for slot in self.slots:
                if slot.process is not None:
                    waitables += [slot.process.sentinel, slot.control]
            now = time.monotonic()
            pending = [s.next_start for s in self.slots if s.process is None]
            timeout = max(0.0, min(pending) - now) if pending else 1.0
            for ready in wait(waitables, timeout=min(timeout, self.config.heartbeat / 4)):
                if ready == self._wake_r:
                    os.read(self._wake_r, 64)
            self._kill_hung()
            self.handoffs.dispatch(self.slots, self.routing, self.frontdoor.held_writes)
            self.roll.step(self.slots, self.handoffs, self.routing, self.frontdoor.held_writes)
            for slot in self.slots:
                if slot.process is not None:
                    self._read_control(slot)
                    if not slot.process.is_alive():
                        if not self._reap(slot):
                            self._drain()
                            return EXIT_RESTART_INTENSITY
                elif time.monotonic() >= slot.next_start and self._stop_reason is None:
                    self._spawn(slot)
            if not announced and all(slot.ready for slot in self.slots):
                announced = True
                pids = ",".join(str(slot.pid) for slot in self.slots)
                sys.stdout.write(f"weft_actors supervisor ready endpoint={self.config.bind} shards={len(self.slots)} pids={pids}\n")
                sys.stdout.flush()

    def _read_control(self, slot: ShardSlot) -> None:
        control = slot.control
        try:
            while control is not None and control.poll():
                message = control.recv()
                if message[0] == "ready":
                    slot.engine_id, slot.pid, slot.ready = message[1], message[2], True
                    slot.unwritable = False
                    slot.ready_at = self.store.clock.lease_now()  # judged against lease times
                    self.routing.set_live(slot.index, message[1], message[3] if len(message) > 3 else "")
                    log.info("shard %d ready (engine %s, pid %d)", slot.index, message[1], message[2])
                elif message[0] == "stats":
                    slot.take_stats(message[1])
                elif message[0] == "handed":
                    self.handoffs.relay(self.slots, message)
        except (EOFError, OSError):
            pass

    def _kill_hung(self) -> None:
        """Kill (SIGKILL) each ready shard that stopped heartbeating (``hung_reason``), a few
        times per heartbeat: its requests go to other shards at once, and its reaping marks
        it dead and restarts it like any crash (it counts toward the restart intensity)."""
        now = time.monotonic()
        if now < self._next_hung_check:
            return
        self._next_hung_check = now + self.config.heartbeat / 4
        clocks = self.drain_watch.clocks(self.handoffs.draining, self.store.clock.lease_now(), self.handoffs.grace)  # draining: watched too
        watched = [slot for slot in self.slots if slot.process is not None and (slot.ready or slot.index in clocks) and not slot.killed and slot.engine_id is not None]
        # A store that refuses or loses every heartbeat silences every shard: that says
        # nothing of a hang, and a kill would only lose what the shards know and hold.
        watch = [(slot.engine_id or "", clocks.get(slot.index, slot.ready_at)) for slot in watched]
        judged, self._refused_at = judge_sparing_refusals(self.store, watch, self.config.ttl, self._refused_at)
        if judged is None:
            return
        self.type_watch.check(judged.records, live_ids(judged.records, judged.wall), (slot.engine_id for slot in self.slots))
        reasons = self.drain_watch.reasons(watched, judged.reasons, judged.records, judged.wall, clocks, self.config.ttl) if clocks else judged.reasons
        for slot, reason in zip(watched, reasons):
            if reason is None:
                continue
            log.error("shard %d (pid %s, engine %s) is hung: %s; killing it%s", slot.index, slot.pid, slot.engine_id, reason, lock_holders(watched, judged))
            self.routing.set_dead(slot.index)
            self.frontdoor.shard_stalled(slot.index)
            slot.killed = True
            self.hung_kills += 1
            try:
                slot.process.kill()
            except OSError as exc:
                log.warning("could not kill shard %d: %s", slot.index, exc)

    def _reap(self, slot: ShardSlot) -> bool:
        """Confirmed death: mark the engine dead, hint, restart with backoff. False when the
        restart intensity is exceeded."""
        process = slot.process
        process.join(0)
        unwritable = process.exitcode == EXIT_UNWRITABLE
        handed = self.handoffs.ended(slot.index, process.exitcode)
        if handed:
            log.info("shard %d (pid %s) handed its workflows off and exited; starting it again", slot.index, slot.pid)
        elif not unwritable:
            log.warning("shard %d (pid %s) exited with code %s%s", slot.index, slot.pid, process.exitcode, " (killed as hung)" if slot.killed else "")
        slot.unwritable = unwritable
        self.routing.set_dead(slot.index)
        self.frontdoor.shard_died(slot.index)
        if slot.engine_id is not None:
            self.deaths.record(slot.engine_id)  # never waits here: the lock may be held
        reader_check = getattr(self.store.env, "reader_check", None)  # LMDB's stale reader slots
        if reader_check is not None:
            try:
                reader_check()
            except Exception:
                pass
        if slot.control is not None:
            slot.control.close()
        slot.process, slot.control, slot.ready, slot.stats = None, None, False, {}
        slot.killed = False
        now = time.monotonic()
        if handed:  # a handoff's planned exit: no crash, no backoff
            slot.next_start = now
            return True
        if unwritable:
            # Not a crash: the store is read-only for now. Retried every few seconds (the
            # shard says why, once per try), never counted toward the restart intensity:
            # the shards still running keep serving, and this one starts once it can.
            _UNWRITABLE_LOG.warning(
                f"slot-{slot.index}", "shard %d cannot start while the store is not writable; trying again", slot.index
            )
            slot.next_start = now + UNWRITABLE_RETRY
            return True
        self._restart_times.append(now)
        while self._restart_times and self._restart_times[0] < now - self.config.restart_window:
            self._restart_times.popleft()
        if len(self._restart_times) > self.config.restart_limit:
            log.error(
                "restart intensity exceeded: %d restarts in %.0f s; shutting down",
                len(self._restart_times),
                self.config.restart_window,
            )
            return False
        if now - slot.started_at > self.config.restart_window:
            slot.restarts = 0  # it ran well for a whole window: back off from scratch
        slot.restarts += 1
        self.restarts += 1
        slot.next_start = now + min(0.05 * 2 ** (slot.restarts - 1), 5.0)
        return True

    def _drain(self) -> None:
        quiet_before_stop(self.slots, self.routing, self.frontdoor)
        # A shard may hand off to a live peer outside (``_leaving``): its grace is waited for too.
        siblings = [slot.engine_id for slot in self.slots if slot.engine_id is not None]
        for slot in self.slots:
            if slot.control is not None:
                try:
                    slot.control.send(("drain", siblings, self.handoffs.grace))
                except OSError:
                    pass
        deadline = time.monotonic() + self.config.drain_timeout + self.handoffs.grace
        for slot in self.slots:
            if slot.process is not None:
                slot.process.join(max(0.0, deadline - time.monotonic()))
        self._shutdown_all()

    def _shutdown_all(self) -> None:
        for slot in self.slots:
            process = slot.process
            if process is not None and process.is_alive():
                log.warning("shard %d did not stop in time; killing it", slot.index)
                process.kill()
                process.join(5)
                if slot.engine_id is not None:
                    self.deaths.record(slot.engine_id)

    def _close(self) -> None:
        self.roll.stop()
        metrics = getattr(self, "metrics", None)
        if metrics is not None:
            metrics.stop()
        console = getattr(self, "console", None)
        if console is not None:
            console.stop()  # before the store closes: its requests read the store
        client = getattr(self, "console_client", None)
        if client is not None:
            client.close()
        self.frontdoor.stop()
        self.deaths.stop()
        self.hints.stop()
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.destroy(linger=0)
        remove_ipc_dir(self._ipc_dir)
        self.store.close()

    # -- queries --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "ready": bool(self.routing.live_slots),
            "workflows": workflow_counts(self.store),
            "flow": flow_counts(self.store),
            "supervisor": {
                "pid": os.getpid(),
                "uptime_s": round(time.time() - self.started, 3),
                "restarts": self.restarts,
                "hung_kills": self.hung_kills,
                "shards": len(self.slots),
                "shards_ready": len(self.routing.live_slots),
                "frontdoor_requests": self.frontdoor.requests,
                "frontdoor_messages": self.frontdoor.messages,
                "frontdoor_errors": self.frontdoor.errors,
                **self.frontdoor.bounds(),
            },
            "shards": [slot.report() for slot in self.slots],
        }
