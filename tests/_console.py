"""A supervisor with the web console on a free port, and plain-HTTP helpers for its tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from _processes import RunningSupervisor, free_port

TOKEN = "console-test-token-0123456789"
APP = "console_app"


def console_supervisor(tmp_path: Path, *, shards: int = 2, args: tuple[str, ...] = ()) -> tuple[RunningSupervisor, str]:
    """A ``RunningSupervisor`` (not started) serving the console, and the console's base URL;
    its action token is ``TOKEN`` (from ``--http-token-file``)."""
    token_file = tmp_path / "console.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    sup = RunningSupervisor(
        tmp_path / "data", shards=shards, app=APP,
        args=("--http", f"127.0.0.1:{port}", "--http-token-file", str(token_file), "--heartbeat", "0.2", "--ttl", "0.6", *args),
    )
    return sup, f"http://127.0.0.1:{port}"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(NoRedirect)


def request(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 15.0) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)``; error statuses and redirects are answers, not exceptions."""
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data is not None else "GET")
    try:
        with _OPENER.open(req, timeout=timeout) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def get_json(url: str) -> Any:
    status, _, body = request(url)
    assert status == 200, (status, body[:500])
    return json.loads(body)


def post_form(url: str, fields: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    return request(url, data=urllib.parse.urlencode(fields).encode(), headers={"Content-Type": "application/x-www-form-urlencoded"})


def post_json(url: str, body: dict[str, Any], token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Weft-Token"] = token
    status, _, raw = request(url, data=json.dumps(body).encode(), headers=headers)
    return status, json.loads(raw)


def wid_url(base: str, wid: str, api: bool = False) -> str:
    return f"{base}{'/api' if api else ''}/workflows/{urllib.parse.quote(wid, safe='')}"


def page_shot(url: str, name: str, tmp_path: Path) -> None:
    """A screenshot of ``url`` (a real PNG, asserted); with ``WEFT_UPDATE_SCREENSHOTS=1`` it
    replaces ``docs/console-<name>.png``, the picture the docs show of that page."""
    import os
    import shutil

    from _chromium import screenshot

    path = tmp_path / f"console-{name}.png"
    screenshot(url, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    if os.environ.get("WEFT_UPDATE_SCREENSHOTS"):
        shutil.copyfile(path, Path(__file__).resolve().parents[1] / "docs" / path.name)
