"""The console's security model in a real headless Chromium: off loopback the browser gets the
login page, and the token typed there becomes a cookie no script can read; a name rebound to
the console's address (DNS rebinding, simulated with Chromium's host resolver rules) reads
nothing."""

from __future__ import annotations

import json

import pytest

from _chromium import DevTools, find_chromium
from _console import TOKEN
from _processes import RunningSupervisor, free_port
from weft_actors import Client

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(find_chromium() is None, reason="no chromium binary (apt-get install -y chromium)"),
]

READ_TOKEN = "console-read-token-abcdefghijkl"
CARD = "4111 1111 1111 1111"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-browser-security")
    (tmp / "act.token").write_text(TOKEN)
    (tmp / "read.token").write_text(READ_TOKEN)
    port = free_port()
    sup = RunningSupervisor(
        tmp / "data", shards=1, app="console_app",
        args=("--http", f"0.0.0.0:{port}", "--insecure-http", "--http-token-file", str(tmp / "act.token"),
              "--http-read-token-file", str(tmp / "read.token")),
    )
    with sup, Client(sup.endpoint, timeout=10) as client:
        client.start("waiter", CARD, id="card-b")
        yield sup, port


def test_the_browser_logs_in_and_the_cookie_is_out_of_reach_of_scripts(served):
    _, port = served
    url = f"http://127.0.0.1:{port}/workflows/card-b"
    with DevTools() as browser:
        browser.open(url)
        assert browser.evaluate("document.title").startswith("Log in")
        assert CARD not in browser.evaluate("document.body.innerText")
        browser.evaluate(
            "(() => { const f = document.querySelector('#login');"
            f" f.querySelector('[name=credential]').value = {READ_TOKEN!r};"
            " f.querySelector('button').click(); })()"
        )
        browser.wait_for("location.pathname === '/workflows/card-b' && document.readyState === 'complete' && !!document.querySelector('#input')")
        assert CARD in browser.evaluate("document.querySelector('#input').innerText")
        assert browser.evaluate("document.cookie") == ""  # HttpOnly: no script on a page sees it
        assert browser.evaluate("sessionStorage.getItem('weft-token')") is None
        # The read token's cookie reads but cannot act: the form without the action token is refused.
        browser.evaluate("(() => { const f = document.querySelector('#cancel'); f.querySelector('[name=token]').removeAttribute('required'); f.querySelector('button').click(); })()")
        browser.wait_for("document.readyState === 'complete' && !!document.querySelector('#cancel-failure')")
        assert "action token is missing or wrong" in browser.evaluate("document.querySelector('#cancel-failure').innerText")
        assert browser.evaluate("document.querySelector('#status').innerText") == "running"  # its page again, unchanged


def test_a_rebound_name_reads_nothing(served):
    _, port = served
    with DevTools(flags=("--host-resolver-rules=MAP rebound.attacker.test 127.0.0.1",)) as browser:
        browser.open(f"http://rebound.attacker.test:{port}/api/workflows/card-b")
        text = browser.evaluate("document.body.innerText")
        assert CARD not in text and json.loads(text)["error"]["code"] == "host_not_allowed"
        # The same request by the console's address is only refused for want of a token.
        browser.open(f"http://127.0.0.1:{port}/api/workflows/card-b")
        assert json.loads(browser.evaluate("document.body.innerText"))["error"]["code"] == "unauthenticated"
