"""``--metrics-port``: the supervisor's and shards' figures in Prometheus text format."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

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


_LABELS = {"claim_attempts_total": "outcome", "wakes_discarded_total": "kind"}


def render(stats: dict[str, Any]) -> str:
    """Numeric figures as ``weft_<name>{slot="N"}``; workflow ids are never labels."""
    lines = []
    supervisor = stats.get("supervisor", {})
    for name, value in sorted(supervisor.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lines.append(f"weft_supervisor_{name} {value}")
    seen: set[str] = set()

    def add(metric: str, kind: str, labels: str, value: Any) -> None:
        if metric not in seen:
            seen.add(metric)
            lines.append(f"# TYPE {metric} {kind}")
        lines.append(f"{metric}{{{labels}}} {value}")

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
                if self.path.rstrip("/") not in ("/metrics", ""):
                    self.send_error(404)
                    return
                body = render(stats()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
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
