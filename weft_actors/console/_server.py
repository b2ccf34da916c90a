"""The console's HTTP server: routes, the token check on every POST, replies.

The HTTP layer is the standard library's ``http.server.ThreadingHTTPServer`` in a thread, as
``--metrics-port`` has always used: an operator console serves a few requests a second, the
project already ships and tests this server for ``/metrics``, and it adds no dependency and
no import time (asyncio + h11, aiohttp or starlette + uvicorn would each bring packages and an
event loop of their own into the supervisor for no gain at this load). Each request runs on
its own thread and blocks on a ``Client`` call or a store read; nothing it does touches the
supervisor's watch loop.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..bus import Client
from ..errors import WeftError
from ..store import LmdbStore
from . import _data, _pages
from ._actions import ACTIONS, run_action
from ._token import token_matches

__all__ = ["ConsoleServer"]

log = logging.getLogger("weft_actors.console")

MAX_BODY = 4 << 20
"""Bytes a POST may carry (a signal's payload is bounded by ``--payload-limit`` anyway)."""

_STATUS_OF = {
    "workflow_not_found": 404,
    "invalid_request": 400,
    "payload_too_large": 413,
    "serialization_error": 400,
    "permission_denied": 403,
    "server_unavailable": 503,
    "outcome_unknown": 503,
    "overloaded": 503,
}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, default=repr).encode()


class ConsoleServer:
    """Serves the pages, ``/api/...``, ``/metrics`` and ``/healthz`` on ``host:port`` until
    ``stop()``.

    ``client`` (connected to the supervisor's own endpoint) answers stats, describe and the
    actions; ``store`` the newest-first list; ``stats`` and ``metrics`` are the supervisor's
    in-process figures for ``/healthz`` and ``/metrics``, which answer even while the front
    door is busy. ``token`` is what every POST must carry.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client: Client,
        store: LmdbStore,
        token: str,
        stats: Callable[[], dict[str, Any]],
        metrics: Callable[[], str],
    ) -> None:
        self.client, self.store, self.token = client, store, token
        self._stats, self._metrics = stats, metrics
        self.reads = _data.ReadPacer()
        console = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "weft-console"
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                console._serve(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                console._serve(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s %s", self.address_string(), format % args)

        server_class = _Server6 if ":" in host else _Server
        self.server = server_class((host, port), Handler)
        self.host = host
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="weft-console", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- dispatch -------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        api = parts.path.startswith("/api/")
        path = parts.path[4:] if api else parts.path
        params = dict(parse_qsl(parts.query))
        try:
            if method == "POST":
                self._post(handler, api, path)
            else:
                self._get(handler, api, path, params)
        except _Refused as refused:
            self._fail(handler, api, refused.status, str(refused))
        except WeftError as exc:
            self._fail(handler, api, _STATUS_OF.get(exc.code, 409), f"{exc.code}: {exc}", exc.code)
        except Exception:
            log.exception("console request %s %s failed", method, handler.path)
            self._fail(handler, api, 500, "internal error (see the supervisor's log)")

    def _get(self, handler: BaseHTTPRequestHandler, api: bool, path: str, params: dict[str, str]) -> None:
        if path in ("/metrics", "/healthz") and not api:
            if path == "/metrics":
                self._reply(handler, 200, self._metrics().encode(), "text/plain; version=0.0.4")
            else:
                stats = self._stats()
                supervisor = stats["supervisor"]
                body = {"ready": stats["ready"], "shards_ready": supervisor["shards_ready"], "shards": supervisor["shards"]}
                self._reply(handler, 200 if stats["ready"] else 503, _json_bytes(body), "application/json")
            return
        if path in ("/", "/overview"):
            data = _data.overview(self.client)
            self._answer(handler, api, data, _pages.overview_page)
        elif path.rstrip("/") == "/workflows":
            data = _data.workflows(self.store, _data.list_query(params), self.reads)
            self._answer(handler, api, data, _pages.workflows_page)
        elif path.rstrip("/") == "/schedules":
            self._answer(handler, api, _data.schedules(self.client), _pages.schedules_page)
        elif path.startswith("/workflows/") and "/" not in path[len("/workflows/"):]:
            described = _data.workflow(self.client, unquote(path[len("/workflows/"):]))
            self._answer(handler, api, described, lambda d: _pages.workflow_page(d, _notice(params), params.get("error")))
        else:
            raise _Refused(404, f"no page at {path}")

    def _post(self, handler: BaseHTTPRequestHandler, api: bool, path: str) -> None:
        rest = path[len("/workflows/"):] if path.startswith("/workflows/") else ""
        quoted, _, action = rest.rpartition("/")
        if not quoted or action not in ACTIONS:
            raise _Refused(404, f"no action at {path}; POST /workflows/<id>/{{{','.join(ACTIONS)}}}")
        form = self._read_form(handler)
        given = form.get("token") or handler.headers.get("X-Weft-Token") or _bearer(handler.headers.get("Authorization"))
        if not token_matches(self.token, given):
            log.warning("console: refused %s on %s from %s: wrong or missing token", action, path, handler.address_string())
            raise _Refused(403, "the action token is missing or wrong (the supervisor printed it at start)")
        wid = unquote(quoted)
        log.info("console: %s %r (from %s)", action, wid, handler.address_string())
        if api:
            run_action(self.client, wid, action, form)
            self._reply(handler, 200, _json_bytes({"ok": True, "id": wid, "action": action}), "application/json")
            return
        target = "/workflows/" + quote(wid, safe="")
        try:
            run_action(self.client, wid, action, form)
            target += f"?done={action}"
        except WeftError as exc:
            target += "?error=" + quote(f"{action} refused: {exc.code}: {exc}", safe="")
        self._redirect(handler, target)

    # -- replies --------------------------------------------------------------------------

    @staticmethod
    def _read_form(handler: BaseHTTPRequestHandler) -> dict[str, str]:
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError:
            raise _Refused(400, "bad Content-Length") from None
        if length > MAX_BODY:
            raise _Refused(413, f"a POST carries at most {MAX_BODY} bytes")
        raw = handler.rfile.read(length) if length > 0 else b""
        if (handler.headers.get("Content-Type") or "").startswith("application/json"):
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                raise _Refused(400, "the body is not JSON") from None
            if not isinstance(body, dict):
                raise _Refused(400, "the body must be a JSON object")
            # The API takes the payload as a JSON value; the action reads it as JSON text.
            if "payload" in body:
                body["payload"] = json.dumps(body["payload"])
            return {str(key): value if isinstance(value, str) else json.dumps(value) for key, value in body.items()}
        try:
            return dict(parse_qsl(raw.decode(), keep_blank_values=True))
        except UnicodeDecodeError:
            raise _Refused(400, "the form is not UTF-8") from None

    def _answer(self, handler: BaseHTTPRequestHandler, api: bool, data: Any, render: Callable[[Any], str]) -> None:
        if api:
            self._reply(handler, 200, _json_bytes(data), "application/json")
        else:
            self._reply(handler, 200, render(data).encode(), "text/html; charset=utf-8")

    def _fail(self, handler: BaseHTTPRequestHandler, api: bool, status: int, message: str, code: str | None = None) -> None:
        if api or handler.path.startswith(("/metrics", "/healthz")):
            body = _json_bytes({"error": {"status": status, "code": code, "message": message}})
            self._reply(handler, status, body, "application/json")
        else:
            self._reply(handler, status, _pages.error_page(status, message).encode(), "text/html; charset=utf-8")

    @staticmethod
    def _redirect(handler: BaseHTTPRequestHandler, location: str) -> None:
        handler.send_response(303)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("Cache-Control", "no-store")
        if content_type.startswith("text/html"):
            # Inline style and script only; no frame may embed the console (clickjacking).
            handler.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
        handler.end_headers()
        handler.wfile.write(body)


def _bearer(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip()
    return None


def _notice(params: dict[str, str]) -> str | None:
    done = params.get("done")
    return f"{done}: done" if done in ACTIONS else None
