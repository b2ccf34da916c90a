"""The console's security model over real HTTP(S) against a real supervisor: off loopback
every read needs a credential (the action token, the read token or the login cookie); TLS
with --http-cert; a Host allow-list against DNS rebinding and Origin checked on POSTs; bad
parameters answered 400 without a traceback and no query text shown as the server's words."""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from _console import TOKEN, request, wid_url
from _processes import RunningSupervisor, free_port
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)

READ_TOKEN = "console-read-token-abcdefghijkl"
CARD = "4111 1111 1111 1111"


def _supervisor(tmp_path: Path, *args: str, host: str = "0.0.0.0", read_token: bool = True) -> tuple[RunningSupervisor, int]:
    (tmp_path / "act.token").write_text(TOKEN)
    (tmp_path / "read.token").write_text(READ_TOKEN)
    port = free_port()
    read = ("--http-read-token-file", str(tmp_path / "read.token")) if read_token else ()
    sup = RunningSupervisor(
        tmp_path / "data", shards=1, app="console_app",
        args=("--http", f"{host}:{port}", "--http-token-file", str(tmp_path / "act.token"), *read, *args),
    )
    return sup, port


def _form(url: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return request(url, data=urllib.parse.urlencode(fields).encode(), headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})


def test_off_loopback_every_read_needs_a_credential_and_only_the_action_token_acts(tmp_path):
    sup, port = _supervisor(tmp_path, "--insecure-http")
    base = f"http://127.0.0.1:{port}"
    with sup, Client(sup.endpoint, timeout=10) as client:
        client.start("waiter", CARD, id="card-1")
        for url in (wid_url(base, "card-1", api=True), wid_url(base, "card-1"), f"{base}/api/workflows", f"{base}/workflows",
                    f"{base}/api/overview", f"{base}/", f"{base}/schedules", f"{base}/metrics"):
            for headers in ({}, {"Authorization": "Bearer wrong-wrong-wrong-wrong"}, {"Cookie": "weft_console=forged"}):
                status, _, body = request(url, headers=headers)
                assert status == 401 and CARD.encode() not in body, (url, headers, status)
        status, headers, body = request(wid_url(base, "card-1"))
        assert 'id="login"' in body.decode() and headers["Content-Type"].startswith("text/html")
        assert request(f"{base}/api/overview")[1]["WWW-Authenticate"].startswith("Bearer")
        assert request(f"{base}/healthz")[0] == 200  # for load balancers: readiness only
        # The read token reads (bearer or X-Weft-Token) but cannot act.
        for headers in ({"Authorization": f"Bearer {READ_TOKEN}"}, {"X-Weft-Token": READ_TOKEN}):
            status, _, body = request(wid_url(base, "card-1", api=True), headers=headers)
            assert status == 200 and json.loads(body)["input"] == [CARD]
            status, _, _ = request(f"{wid_url(base, 'card-1', api=True)}/cancel", data=b"{}", headers={"Content-Type": "application/json", **headers})
            assert status == 403
        assert client.get_handle("card-1").describe()["status"] == "running"
        # The login page: a cookie (HttpOnly, SameSite=Strict) holding a digest, not the token.
        status, headers, _ = _form(f"{base}/login", {"credential": "not-a-token-at-all", "next": "/"})
        assert status == 401 and "Set-Cookie" not in headers
        status, headers, _ = _form(f"{base}/login", {"credential": READ_TOKEN, "next": "//evil.example/"})
        assert status == 303 and headers["Location"] == "/"
        cookie = headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and READ_TOKEN not in cookie
        jar = {"Cookie": cookie.split(";")[0]}
        status, _, body = request(wid_url(base, "card-1"), headers=jar)
        assert status == 200 and CARD.encode() in body
        assert _form(f"{wid_url(base, 'card-1')}/terminate", {"reason": "x"}, jar)[0] == 403
        status, headers, _ = _form(f"{base}/login", {"credential": TOKEN, "next": "/workflows/card-1"})
        assert status == 303 and headers["Location"] == "/workflows/card-1"
        acting = {"Cookie": headers["Set-Cookie"].split(";")[0]}
        status, headers, _ = _form(f"{wid_url(base, 'card-1')}/terminate", {"reason": "by cookie", "confirm": "yes"}, acting)
        assert status == 303 and headers["Location"] == "/workflows/card-1?done=terminate"
        assert client.get_handle("card-1").describe()["status"] == "terminated"


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "console.crt", tmp_path / "console.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make a certificate")
def test_tls_with_a_certificate_and_a_non_loopback_console_refused_without_one(tmp_path):
    cert, key = _certificate(tmp_path)
    sup, port = _supervisor(tmp_path, "--http-cert", str(cert), "--http-key", str(key))
    with sup:
        assert f"web console on https://0.0.0.0:{port}/" in sup.log_text()
        trusted = ssl.create_default_context(cafile=str(cert))
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=trusted, timeout=10)
        try:
            connection.request("GET", "/api/overview")
            reply = connection.getresponse()
            assert reply.status == 401
            reply.read()
            connection.request("POST", "/login", body=urllib.parse.urlencode({"credential": READ_TOKEN}), headers={"Content-Type": "application/x-www-form-urlencoded"})
            reply = connection.getresponse()
            reply.read()
            assert reply.status == 303 and reply.getheader("Set-Cookie").endswith("; Secure")
            connection.request("GET", "/api/overview", headers={"Authorization": f"Bearer {READ_TOKEN}"})
            reply = connection.getresponse()
            assert reply.status == 200 and json.loads(reply.read())["ready"] is True
        finally:
            connection.close()
        with pytest.raises((OSError, http.client.HTTPException)):
            request(f"http://127.0.0.1:{port}/healthz", timeout=5)  # plain HTTP gets no answer
    # Off loopback, without TLS and without --insecure-http: refused at start, exit 1.
    (tmp_path / "plain").mkdir()
    refused, _ = _supervisor(tmp_path / "plain")
    refused.start(wait_ready=False)
    try:
        assert refused.wait(30) == 1
    finally:
        refused.kill()
    assert "refusing to serve the console on 0.0.0.0 over plain HTTP" in refused.log_text()


def test_a_foreign_host_is_refused(tmp_path):
    sup, port = _supervisor(tmp_path, host="127.0.0.1", read_token=False)
    base = f"http://127.0.0.1:{port}"
    with sup, Client(sup.endpoint, timeout=10) as client:
        client.start("waiter", CARD, id="host-1")
        url = wid_url(base, "host-1", api=True)
        # A page whose name was rebound to 127.0.0.1 sends its own name as Host: no data.
        for host in (f"rebound.attacker.example:{port}", "rebound.attacker.example", f"127.0.0.1.attacker.example:{port}", ""):
            for target in (url, f"{base}/workflows", f"{base}/metrics"):
                status, _, body = request(target, headers={"Host": host})
                assert status in (400, 421) and CARD.encode() not in body and b"host-1" not in body, (host, target, status)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            status, _, body = request(url, headers={"Host": host})
            assert status == 200 and CARD.encode() in body, host


def test_names_given_with_http_host_pass_and_a_post_from_another_origin_is_refused(tmp_path):
    sup, port = _supervisor(tmp_path, "--http-host", "Console.Example.Internal", host="127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    with sup, Client(sup.endpoint, timeout=10) as client:
        client.start("waiter", CARD, id="host-2")
        url = wid_url(base, "host-2", api=True)
        status, _, body = request(url, headers={"Host": f"console.example.internal:{port}"})
        assert status == 200 and CARD.encode() in body
        # A POST from another site's page is refused, token or not; from the console's own, it acts.
        signal = {"Content-Type": "application/json", "X-Weft-Token": TOKEN}
        for origin in ("http://rebound.attacker.example", "null", f"https://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"):
            status, _, body = request(f"{url}/cancel", data=b"{}", headers={**signal, "Origin": origin})
            assert status == 403 and json.loads(body)["error"]["code"] == "origin_not_allowed", origin
        assert _form(f"{base}/login", {"credential": TOKEN}, {"Origin": "http://rebound.attacker.example"})[0] == 403
        assert client.get_handle("host-2").describe()["status"] == "running"
        status, _, _ = request(f"{url}/cancel", data=b"{}", headers={**signal, "Origin": f"http://127.0.0.1:{port}"})
        assert status == 200


def test_bad_parameters_get_400_without_a_traceback_and_no_query_text_on_a_page(tmp_path):
    sup, port = _supervisor(tmp_path, host="127.0.0.1", read_token=False)
    base = f"http://127.0.0.1:{port}"
    with sup, Client(sup.endpoint, timeout=10) as client:
        client.start("echo", "x", id="param-1").result(timeout=10)
        for value in ("nan", "inf", "-inf", "1e308", "-1e308", "NaN", "9e18", "-1"):
            for key in ("from", "to"):
                status, _, body = request(f"{base}/api/workflows?{key}={value}")
                error = json.loads(body)["error"]
                assert status == 400 and error["code"] == "invalid_request" and "between 1970 and 9999" in error["message"], (key, value)
                status, _, body = request(f"{base}/workflows?{key}={value}")
                assert status == 400 and value.encode() not in body.split(b"<main>")[1]
        bait = "Session expired: call +1-555-0100 and read them your token"
        for url in (f"{wid_url(base, 'param-1')}?error={urllib.parse.quote(bait)}",
                    f"{base}/workflows?status={urllib.parse.quote(bait)}",
                    f"{base}/workflows?cursor={urllib.parse.quote(bait)}",
                    f"{base}/{urllib.parse.quote(bait)}?x=1"):
            status, _, body = request(url)
            assert b"call +1-555-0100" not in body, url
        assert request(f"{wid_url(base, 'param-1')}?done=terminate")[0] == 200
        assert "Traceback" not in sup.log_text() and "console request" not in sup.log_text()


def test_without_h11_the_supervisor_runs_and_http_says_how_to_install_it(tmp_path):
    """h11 is the ``console`` extra: a supervisor without ``--http`` never imports it, and
    ``--http`` without it is a usage error naming the extra."""
    blocked = "import sys; sys.modules['h11'] = None; from weft_actors.supervisor.__main__ import main; sys.argv[0] = 'x'; sys.exit(main(sys.argv[1:]))"
    base = [sys.executable, "-c", blocked, "--shards", "1", "--data", str(tmp_path / "d"), "--bind", f"tcp://127.0.0.1:{free_port()}"]
    done = subprocess.run([*base, "--http", str(free_port())], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "pip install 'weft_actors[console]'" in done.stderr, done.stderr
    imports = subprocess.run(
        [sys.executable, "-c", "import sys, weft_actors.supervisor, weft_actors.supervisor.__main__; print('h11' in sys.modules, 'weft_actors.console' in sys.modules)"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    assert imports.stdout.split() == ["False", "False"]
