"""Supervisor and shard configuration, and the logging both set up."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from typing import Any

__all__ = ["SupervisorConfig", "ShardConfig", "configure_logging"]


@dataclasses.dataclass(frozen=True)
class SupervisorConfig:
    shards: int
    app: str = "weft_actors.examples"
    data_dir: str = "./weft-data"
    bind: str = "tcp://127.0.0.1:5555"
    heartbeat: float = 0.5
    ttl: float = 3.0
    log_level: str = "INFO"
    log_json: bool = False
    curve_secret_key: str | None = None
    curve_authorized_keys: str | None = None
    curve_readonly_keys: str | None = None
    insecure_bind: bool = False
    metrics_port: int | None = None
    http: str | None = None
    """``HOST:PORT`` (or ``PORT``, on loopback) of the web console; ``None``: no console."""
    http_token_file: str | None = None
    """A file holding the console's action token; ``None``: a random one, logged at start."""
    http_read_token_file: str | None = None
    """A file holding a token that may read the console but not act; ``None``: none."""
    http_cert: str | None = None
    """PEM certificate (chain) the console serves TLS with; ``None``: plain HTTP."""
    http_key: str | None = None
    """PEM private key of ``http_cert``; ``None``: the key is in ``http_cert``'s file."""
    insecure_http: bool = False
    """Allow a non-loopback console without TLS."""
    http_hosts: tuple[str, ...] = ()
    """Names the console answers to as ``Host`` besides IP literals and ``localhost``."""
    http_max_connections: int = 64
    http_timeout: float = 10.0
    """Seconds a console connection gets to send a whole request; idle this long, it is closed."""
    hints: bool = True
    restart_limit: int = 5
    restart_window: float = 30.0
    drain_timeout: float = 10.0
    handoff_grace: float = 30.0
    """Seconds a shard handing off (``SIGUSR1``, or ``SIGTERM`` to a live peer) lets its running
    activity attempts finish."""
    ready_timeout: float = 5.0
    """Seconds a request that finds no shard ready (start-up, every shard restarting) waits
    for one before it fails with ``ServerUnavailable``."""
    payload_limit: int = 1 << 20
    routing: str = "owner"
    retention: float = 7 * 86400.0
    max_live_actors: int = 100_000
    max_active_workflows: int | None = None
    max_inbox: int = 10_000
    max_inflight_activities: int = 1000
    quarantine_after: int = 1
    stall_threshold: float | None = None
    max_running: int = 10_000
    max_queued_requests: int = 20_000
    """Requests one shard may hold (sent it and not answered) before the front door refuses
    more for it with ``Overloaded``; the shard bounds its own the same way."""
    max_queued_starts: int = 1000
    """Starts one shard may hold unanswered before the front door refuses more for it."""
    max_intake_bytes: int = 512 << 20
    """How far clients' unfinished messages (libzmq holds every part until the last) may grow
    the supervisor before the connection sending the most is cut; 0: never."""


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    slot: int
    app: str
    data_dir: str
    backend: str
    hints_publish: str
    hints_subscribe: str
    heartbeat: float
    ttl: float
    log_level: str
    log_json: bool
    hints: bool
    payload_limit: int
    retention: float = 7 * 86400.0
    max_live_actors: int = 100_000
    max_active_workflows: int | None = None
    max_inbox: int = 10_000
    max_inflight_activities: int = 1000
    quarantine_after: int = 1
    stall_threshold: float | None = None
    max_running: int = 10_000
    max_queued_requests: int = 20_000
    direct_bind: str | None = None
    """Where the shard binds its own socket for clients (``_direct_socket``); None: none."""


_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
"""What every ``LogRecord`` has: anything else on a record came as ``extra=`` from the call."""


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: the fixed keys, then the fields the call passed as
    ``extra=`` (a workflow event's ``workflow_id``, ``op``, ``attempt``, ...: see
    ``shard/_events``) under their own names; a value JSON cannot hold is written as text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "process": record.processName,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, as_json: bool, process: str) -> None:
    """Log to stderr; stdout is kept for the supervisor's one ready line."""
    handler = logging.StreamHandler(sys.stderr)
    if as_json:
        handler.setFormatter(_JsonFormatter())
    else:
        formatter = logging.Formatter(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
