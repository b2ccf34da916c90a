"""The console's routes: a parsed ``Request`` in, a ``Response`` out, behind ``Access``.

``handle`` is the seam: it turns one request into one response and knows nothing of sockets
(``_http`` serves it), so another way to read (say, off the front door's process) plugs in
here. ``quick`` answers on the transport's loop what needs no worker: the Host and Origin
checks, a missing credential and the login page; ``/healthz`` (a store read) goes to the
transport's side thread. None of them waits behind requests blocked on the front door. Each request blocks on a ``Client`` call or a store
read; nothing it does touches the supervisor's watch loop.
"""

from __future__ import annotations

import json
import logging
import ssl
from typing import Any, Callable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..bus import Client
from ..errors import WeftError
from ..store import LmdbStore
from . import _data, _pages
from ._access import Access
from ._actions import ACTIONS, run_action, run_query
from ._http import HttpLimits, HttpServer, Request, Response
from ._json_input import json_input
from ._schedule_actions import SCHEDULE_ACTIONS, run_schedule_action, schedule
from ._schedule_page import schedule_href, schedule_page

__all__ = ["ConsoleServer"]

log = logging.getLogger("weft_actors.console")

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

_HTML = "text/html; charset=utf-8"
_JSON = "application/json"
# Inline style and script only; no frame may embed the console (clickjacking).
_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, default=repr).encode()


def _reply(status: int, body: bytes, content_type: str, *headers: tuple[str, str]) -> Response:
    fixed = [("Content-Type", content_type), ("Cache-Control", "no-store")]
    if content_type == _HTML:
        fixed.append(("Content-Security-Policy", _CSP))
    return Response(status, body, [*fixed, *headers])


def _redirect(location: str, *headers: tuple[str, str]) -> Response:
    return Response(303, b"", [("Location", location), ("Cache-Control", "no-store"), *headers])


def _local_path(target: str | None) -> str:
    """``target`` if it is a path on this console, else ``/``: a login never sends anyone
    elsewhere (``//host`` and ``/\\host`` are other sites to a browser)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    return target


class ConsoleServer:
    """Serves the pages, ``/api/...``, ``/metrics`` and ``/healthz`` on ``host:port`` until
    ``stop()``.

    ``client`` (connected to the supervisor's own endpoint) answers stats, describe and the
    actions; ``store`` the newest-first list; ``stats`` and ``metrics`` are the supervisor's
    in-process figures for ``/healthz`` and ``/metrics``, which answer even while the front
    door is busy. ``access`` says who may read and who may act.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client: Client,
        store: LmdbStore,
        access: Access,
        stats: Callable[[], dict[str, Any]],
        metrics: Callable[[], str],
        limits: HttpLimits = HttpLimits(),
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.client, self.store, self.access = client, store, access
        self._stats, self._metrics = stats, metrics
        self.reads = _data.ReadPacer()
        self.http = HttpServer(host, port, self.handle, self.quick, limits=limits, tls=tls)
        self.host = host
        self.port = self.http.port
        self.scheme = "https" if tls is not None else "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/"

    def start(self) -> None:
        self.http.start()

    def stop(self) -> None:
        self.http.stop()

    # -- on the loop: checks, /healthz, the login ----------------------------------------

    def quick(self, request: Request) -> Response | Callable[[], Response] | None:
        """The answer for what needs no worker (``_http.Quick``); ``None`` sends ``request``
        to ``handle``."""
        path = urlsplit(request.target).path
        api = path.startswith("/api/")
        host = request.headers.get("host", "")
        if not self.access.host_allowed(host):
            log.warning("console: refused %s %s from %s: Host %r is not the console's (--http-host)", request.method, path, request.peer, host)
            return self._fail(api, 421, "host_not_allowed", "this console does not answer to that Host name (see --http-host)")
        if request.method not in ("GET", "HEAD", "POST"):
            return self._fail(api, 405, "method_not_allowed", "only GET and POST")
        if request.method == "POST" and not self.access.origin_allowed(request.headers.get("origin"), host):
            log.warning("console: refused POST %s from %s: Origin %r is another site", path, request.peer, request.headers.get("origin"))
            return self._fail(api, 403, "origin_not_allowed", "a POST must come from the console's own pages")
        if path == "/healthz":
            return self._health
        if path == "/login":
            return self._login(request)
        if path == "/logout" and request.method == "POST":
            return _redirect("/login", ("Set-Cookie", self.access.logout_cookie()))
        if request.method != "POST" and not self.access.grant(request.headers):
            if api or path == "/metrics":
                return self._fail(True, 401, "unauthenticated", "this console needs a token: Authorization: Bearer <token>", ("WWW-Authenticate", 'Bearer realm="weft console"'))
            return _reply(401, _pages.login_page(request.target, False).encode(), _HTML)
        return None

    def _health(self) -> Response:
        stats = self._stats()
        supervisor = stats["supervisor"]
        body = {"ready": stats["ready"], "shards_ready": supervisor["shards_ready"], "shards": supervisor["shards"]}
        return _reply(200 if stats["ready"] else 503, _json_bytes(body), _JSON)

    def _login(self, request: Request) -> Response:
        if request.method != "POST":
            return _reply(200, _pages.login_page("/", False).encode(), _HTML)
        form = dict(parse_qsl(request.body.decode("utf-8", "replace"), keep_blank_values=True))
        grant, cookie = self.access.login_cookie(form.get("credential", "").strip())
        if cookie is None:
            log.warning("console: refused a login from %s: wrong token", request.peer)
            return _reply(401, _pages.login_page(form.get("next", "/"), True).encode(), _HTML)
        log.info("console: %s login from %s", grant, request.peer)
        return _redirect(_local_path(form.get("next")), ("Set-Cookie", cookie))

    # -- on a worker: the routes ---------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """The answer to ``request`` (already past ``quick``); never raises."""
        parts = urlsplit(request.target)
        api = parts.path.startswith("/api/")
        path = parts.path[4:] if api else parts.path
        try:
            if request.method == "POST":
                return self._post(request, api, path)
            return self._get(api, path, dict(parse_qsl(parts.query)))
        except _Refused as refused:
            return self._fail(api, refused.status, refused.code, str(refused))
        except WeftError as exc:
            return self._fail(api, _STATUS_OF.get(exc.code, 409), exc.code, f"{exc.code}: {exc}")
        except Exception:
            log.exception("console request %s %s failed", request.method, parts.path)
            return self._fail(api, 500, "internal", "internal error (see the supervisor's log)")

    def _get(self, api: bool, path: str, params: dict[str, str]) -> Response:
        if path == "/metrics" and not api:
            return _reply(200, self._metrics().encode(), "text/plain; version=0.0.4")
        if path in ("/", "/overview"):
            return self._answer(api, _data.overview(self.client), _pages.overview_page)
        if path.rstrip("/") == "/workflows":
            return self._answer(api, _data.workflows(self.store, _data.list_query(params), self.reads), _pages.workflows_page)
        if path.rstrip("/") == "/schedules":
            return self._answer(api, _data.schedules(self.client), _pages.schedules_page)
        if path.startswith("/schedules/") and "/" not in path[len("/schedules/"):]:
            item = schedule(self.client, unquote(path[len("/schedules/"):]))
            done = params.get("done")
            return self._answer(api, item, lambda d: schedule_page(d, f"{done}: done" if done in SCHEDULE_ACTIONS else None))
        if path.startswith("/workflows/") and "/" not in path[len("/workflows/"):]:
            described = _data.workflow(self.client, unquote(path[len("/workflows/"):]))
            return self._answer(api, described, lambda d: _pages.workflow_page(d, _notice(params)))
        raise _Refused(404, "not_found", "no such page")

    def _post(self, request: Request, api: bool, path: str) -> Response:
        if path.startswith("/schedules/"):
            return self._schedule_post(request, api, path)
        rest = path[len("/workflows/"):] if path.startswith("/workflows/") else ""
        quoted, _, action = rest.rpartition("/")
        if not quoted or (action not in ACTIONS and action != "query"):
            raise _Refused(404, "not_found", f"no such action; POST /workflows/<id>/{{{','.join((*ACTIONS, 'query'))}}}")
        form = _read_form(request)
        grant = self.access.grant(request.headers, form.get("token"))
        wid = unquote(quoted)
        if action == "query":  # a read: what may read the page may ask it
            if not grant:
                raise _Refused(401, "unauthenticated", "this console needs a token to read")
            return self._query(api, wid, form)
        if grant != "act":
            log.warning("console: refused %s on %s from %s: wrong or missing token", action, path, request.peer)
            message = "the action token is missing or wrong (the supervisor printed it at start)"
            if api or grant != "read":
                raise _Refused(403, "permission_denied", message)
            return self._again(wid, action, form, 403, f"{action} refused: permission_denied: {message}")
        if not api and action == "terminate" and form.get("confirm") != "yes":
            return self._again(wid, action, form, 400, "terminate refused: confirm_missing: tick confirm to terminate")
        log.info("console: %s %r (from %s)", action, wid, request.peer)
        if api:
            run_action(self.client, wid, action, form, by=f"console {request.peer}")
            return _reply(200, _json_bytes({"ok": True, "id": wid, "action": action}), _JSON)
        try:
            run_action(self.client, wid, action, form, by=f"console {request.peer}")
        except WeftError as exc:
            # Answered here, not through the URL: no page shows text a link could carry.
            return self._again(wid, action, form, _STATUS_OF.get(exc.code, 409), f"{action} refused: {exc.code}: {exc}")
        return _redirect("/workflows/" + quote(wid, safe="") + f"?done={action}")

    def _query(self, api: bool, wid: str, form: dict[str, str]) -> Response:
        """A query's answer: JSON for the API, else the workflow page with the answer (or the
        error) under the query form, as typed."""
        if api:
            answer = run_query(self.client, wid, form)
            return _reply(200, _json_bytes({"ok": True, "id": wid, "query": form.get("name"), "answer": answer}), _JSON)
        try:
            answer = run_query(self.client, wid, form)
        except WeftError as exc:
            return self._again(wid, "query", form, _STATUS_OF.get(exc.code, 409), f"query refused: {exc.code}: {exc}")
        return self._again(wid, "query", form, 200, None, answer)

    def _again(self, wid: str, action: str, form: dict[str, str], status: int, failure: str | None, answer: Any = None) -> Response:
        """The workflow page again after a POST, the form as typed (never the token) with the
        failure or the answer; the error page if the workflow cannot be described."""
        target = "/workflows/" + quote(wid, safe="")
        try:
            described = _data.workflow(self.client, wid)
        except WeftError as exc:
            message = failure or f"{exc.code}: {exc}"
            return _reply(status if failure else _STATUS_OF.get(exc.code, 409), _pages.error_page(status, message, back=target).encode(), _HTML)
        kept = {"action": action, "form": {k: v for k, v in form.items() if k != "token"}, "failure": failure, "answer": answer}
        return _reply(status, _pages.workflow_page(described, kept=kept).encode(), _HTML)

    def _schedule_post(self, request: Request, api: bool, path: str) -> Response:
        """A schedule's action (``_schedule_actions``): the action token, as a workflow's."""
        quoted, _, action = path[len("/schedules/"):].rpartition("/")
        if not quoted or action not in SCHEDULE_ACTIONS:
            raise _Refused(404, "not_found", f"no such action; POST /schedules/<id>/{{{','.join(SCHEDULE_ACTIONS)}}}")
        form = _read_form(request)
        sid = unquote(quoted)
        grant = self.access.grant(request.headers, form.get("token"))
        failure: tuple[int, str] | None = None
        if grant != "act":
            log.warning("console: refused schedule %s on %s from %s: wrong or missing token", action, path, request.peer)
            failure = (403, f"{action} refused: permission_denied: the action token is missing or wrong (the supervisor printed it at start)")
            if api or grant != "read":
                raise _Refused(403, "permission_denied", failure[1])
        else:
            log.info("console: schedule %s %r (from %s)", action, sid, request.peer)
            try:
                run_schedule_action(self.client, sid, action, form)
            except WeftError as exc:
                if api:
                    raise
                failure = (_STATUS_OF.get(exc.code, 409), f"{action} refused: {exc.code}: {exc}")
        if api:
            return _reply(200, _json_bytes({"ok": True, "id": sid, "action": action}), _JSON)
        if failure is None:
            return _redirect(schedule_href(sid) + f"?done={action}")
        kept = {"action": action, "form": {k: v for k, v in form.items() if k != "token"}, "failure": failure[1]}
        try:
            item = schedule(self.client, sid)
        except WeftError:
            return _reply(failure[0], _pages.error_page(failure[0], failure[1], back=schedule_href(sid)).encode(), _HTML)
        return _reply(failure[0], schedule_page(item, kept=kept).encode(), _HTML)

    # -- replies --------------------------------------------------------------------------

    @staticmethod
    def _answer(api: bool, data: Any, render: Callable[[Any], str]) -> Response:
        if api:
            return _reply(200, _json_bytes(data), _JSON)
        return _reply(200, render(data).encode(), _HTML)

    @staticmethod
    def _fail(api: bool, status: int, code: str, message: str, *headers: tuple[str, str]) -> Response:
        if api:
            return _reply(status, _json_bytes({"error": {"status": status, "code": code, "message": message}}), _JSON, *headers)
        return _reply(status, _pages.error_page(status, message).encode(), _HTML, *headers)


def _read_form(request: Request) -> dict[str, str]:
    """A POST's fields: a JSON object (the API) or a URL-encoded form (the pages)."""
    raw = request.body
    if (request.headers.get("content-type") or "").startswith("application/json"):
        body = json_input(raw or b"{}", "the body", '{"name": "status"}')
        if not isinstance(body, dict):
            raise _Refused(400, "invalid_request", "the body must be a JSON object")
        # The API takes the payload as a JSON value; the action reads it as JSON text.
        if "payload" in body:
            body["payload"] = json.dumps(body["payload"])
        return {str(key): value if isinstance(value, str) else json.dumps(value) for key, value in body.items()}
    try:
        return dict(parse_qsl(raw.decode(), keep_blank_values=True))
    except UnicodeDecodeError:
        raise _Refused(400, "invalid_request", "the form is not UTF-8") from None


def _notice(params: dict[str, str]) -> str | None:
    done = params.get("done")
    return f"{done}: done" if done in ACTIONS else None
