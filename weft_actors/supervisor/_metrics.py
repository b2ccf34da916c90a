"""``--metrics-port``: the supervisor's and shards' figures in Prometheus text format, and
``/healthz``. The web console (``--http``) serves both on its own port too."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from ..store import STATUSES

__all__ = ["MetricsServer", "render"]

_COUNTERS = {
    "commits_total",
    "writes_total",
    "heartbeat_failures",
    "claims_acquired",
    "claims_takeover",
    "claims_lost_race",
    "claims_deposed",
    "workflows_completed",
    "activities_started",
}


_LABELS = {"claim_attempts_total": "outcome", "wakes_discarded_total": "kind", "reclaim_pass_seconds": "stat"}

_HELP = {
    "supervisor_uptime_s": "Seconds since the supervisor started.",
    "supervisor_restarts": "Shard restarts by the supervisor (crashes, hung kills, deposed exits).",
    "supervisor_hung_kills": "Shards the supervisor killed because they stopped heartbeating.",
    "supervisor_shards": "Shard slots configured.",
    "supervisor_shards_ready": "Shards ready to take requests.",
    "supervisor_frontdoor_requests": "Client requests the front door received.",
    "supervisor_frontdoor_messages": "Client messages the front door received (a batch of requests is one).",
    "supervisor_frontdoor_errors": "Client requests the front door answered with an error itself.",
    "supervisor_frontdoor_overloaded_total": "Requests refused with Overloaded by the front door.",
    "supervisor_frontdoor_replies_dropped_total": "Replies dropped for clients that do not read them.",
    "supervisor_frontdoor_messages_cut_total": "Client messages cut for having more parts than a request.",
    "supervisor_frontdoor_connections_cut_total": "Client connections cut by the intake guard (--max-intake-mb).",
    "supervisor_frontdoor_replies_held_bytes": "Bytes of replies held for slow clients now.",
    "supervisor_frontdoor_start_latency_p50_ms": "Median latency of accepted starts inside the service (ms).",
    "supervisor_frontdoor_start_latency_p99_ms": "99th percentile latency of accepted starts inside the service (ms).",
    "shard_alive": "1 if the shard process is alive.",
    "shard_restarts": "Times this slot's shard was restarted.",
    "shard_live_actors": "Workflows in memory on the shard.",
    "shard_parked_actors": "Workflows in memory waiting on a signal or timer.",
    "shard_claims_active": "Workflows the shard's engine owns.",
    "shard_commits_total": "Group commits (store transactions) made.",
    "shard_commits_per_s": "Group commits per second, recently.",
    "shard_writes_total": "Writes (intents) committed.",
    "shard_timers": "Timers armed in the shard's timer service (live ones: fired and cancelled timers are not counted).",
    "shard_timer_entries": "Entries the shard's timer heap holds, cancelled ones not yet dropped included (its memory; stays within the live timers + 64).",
    "shard_loop_lag_ms": "Worst lateness of the shard's event loop over the last second (ms): how long a ready callback waits for it.",
    "workflows": "Workflows in the store by type and status (kept by every status change; every shard's store is the same one).",
    "flow_running": "Slots taken (workflows running) of a type under flow control, over all its keys.",
    "flow_queued": "Starts of a type under flow control waiting in its queue, over all its keys.",
    "shard_workflows_in_flight": "Workflows running now, not parked (bounded by --max-running).",
    "shard_starts_overloaded_total": "Starts refused with Overloaded by the shard.",
    "shard_quarantined_workflows": "Workflows quarantined in the store.",
    "shard_stuck_workflows": "Workflows stuck in the store (their replay diverged from their history).",
    "shard_loop_stalls_total": "Event loop stalls the watchdog reported.",
    "shard_claim_attempts_total": "Claim attempts by outcome.",
    "shard_heartbeat_failures_total": "Heartbeats that failed to commit.",
    "shard_workflows_completed": "Workflows completed on the shard.",
}


def _label(value: Any) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(stats: dict[str, Any]) -> str:
    """Numeric figures as ``weft_<name>{slot="N"}``, each family with its HELP and TYPE
    lines; workflow ids are never labels. ``weft_workflows{type, status}`` has a series for
    every status of each type the store holds (0 included: a status that empties keeps its
    series)."""
    lines: list[str] = []
    seen: set[str] = set()

    def declare(metric: str, kind: str) -> None:
        if metric not in seen:
            seen.add(metric)
            short = metric.removeprefix("weft_")
            lines.append(f"# HELP {metric} {_HELP.get(short, short.replace('_', ' ').capitalize() + '.')}")
            lines.append(f"# TYPE {metric} {kind}")

    def add(metric: str, kind: str, labels: str, value: Any) -> None:
        declare(metric, kind)
        lines.append(f"{metric}{{{labels}}} {value}")

    supervisor = stats.get("supervisor", {})
    for name, value in sorted(supervisor.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            metric = f"weft_supervisor_{name}"
            declare(metric, "counter" if name.endswith("_total") or name in ("restarts", "hung_kills", "frontdoor_requests", "frontdoor_messages", "frontdoor_errors") else "gauge")
            lines.append(f"{metric} {value}")

    counts: dict[str, dict[str, int]] = {}
    for entry in stats.get("workflows") or ():
        counts.setdefault(str(entry["type"]), {})[entry["status"]] = entry["count"]
    for wf_type, by_status in sorted(counts.items()):
        for status in STATUSES:
            add("weft_workflows", "gauge", f'type="{_label(wf_type)}",status="{status}"', by_status.get(status, 0))

    for entry in stats.get("flow") or ():
        labels = f'type="{_label(entry["type"])}"'
        add("weft_flow_running", "gauge", labels, entry["running"])
        add("weft_flow_queued", "gauge", labels, entry["queued"])

    for shard in stats.get("shards", []):
        slot = shard.get("slot")
        for name, value in sorted(shard.items()):
            if name in ("slot", "pid"):
                continue
            kind = "counter" if name in _COUNTERS or name.endswith("_total") else "gauge"
            if isinstance(value, bool):
                add(f"weft_shard_{name}", "gauge", f'slot="{slot}"', int(value))
            elif isinstance(value, (int, float)):
                add(f"weft_shard_{name}", kind, f'slot="{slot}"', value)
            elif isinstance(value, dict):  # labelled families: claim outcomes, wake kinds, ...
                label = _LABELS.get(name, "kind")
                for key, item in sorted(value.items()):
                    if isinstance(item, (int, float)) and not isinstance(item, bool):
                        add(f"weft_shard_{name}", kind, f'slot="{slot}",{label}="{key}"', item)
    return "\n".join(lines) + "\n"


class MetricsServer:
    def __init__(self, port: int, stats: Callable[[], dict[str, Any]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.rstrip("/")
                if path not in ("/metrics", "", "/healthz"):
                    self.send_error(404)
                    return
                status, content_type = 200, "text/plain; version=0.0.4"
                if path == "/healthz":  # as the console's: 200 once a shard is ready, 503 before
                    figures = stats()
                    ready = bool(figures["ready"])
                    body = json.dumps({"ready": ready, "shards_ready": figures["supervisor"]["shards_ready"], "shards": figures["supervisor"]["shards"]}).encode()
                    status, content_type = (200 if ready else 503), "application/json"
                else:
                    body = render(stats()).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="weft-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
