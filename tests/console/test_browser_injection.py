"""Markup a user controls, in every place issue 30's pages show it, stays text in a real
headless Chromium: memo keys and values (the workflow page, the list's memo filter), signal
payloads in the history, names in the inbox, a query's name, arguments and answer, schedule
notes. The console's CSP allows inline script, so escaping is what stands between a payload
and the page: each injection would set ``window.__pwned`` if it ran."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from _chromium import DevTools, find_chromium
from _console import TOKEN, console_supervisor, wid_url
from weft_actors import Client

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(find_chromium() is None, reason="no chromium binary (apt-get install -y chromium)"),
]

SCRIPT = "<script>window.__pwned = 1</script>"
IMG = "<img src=x onerror=\"window.__pwned = 1\">"
ATTR = "\" autofocus onfocus=\"window.__pwned = 1"
CLOSE = "</pre></code></td></textarea>" + IMG


def _submit(browser: DevTools, form: str, fields: dict[str, str]) -> None:
    script = [f"const f = document.querySelector({form!r}); window.__before = true;"]
    script += [f"f.querySelector('[name={name}]').value = {json.dumps(value)};" for name, value in fields.items()]
    browser.evaluate("(() => {" + " ".join(script) + " f.querySelector('button').click(); })()")
    browser.wait_for("!window.__before && document.readyState === 'complete'")


def _clean(browser: DevTools) -> None:
    assert browser.evaluate("window.__pwned === undefined && document.querySelectorAll('main script, main img').length === 0")


def test_user_markup_stays_text_on_the_new_surfaces(tmp_path):
    sup, base = console_supervisor(tmp_path, shards=1)
    with sup, Client(sup.endpoint, timeout=10) as client:
        memo = {IMG: SCRIPT, "k": CLOSE, "a": ATTR}
        handle = client.start("waiter", SCRIPT, id="inject-1", memo=memo)
        for payload in (SCRIPT, {"k": CLOSE}, ATTR):
            handle.signal("item", payload)
        handle.signal(IMG, CLOSE)  # no handler: it waits in the inbox
        client.create_schedule("s-inject", "echo", "tick", spec={"every": 3600})
        client.get_schedule("s-inject").pause(CLOSE + ATTR)
        with DevTools() as browser:
            browser.open(wid_url(base, "inject-1"))
            _clean(browser)
            text = browser.evaluate("document.body.innerText")
            assert SCRIPT in text and "</pre></code></td></textarea><img src=x onerror=" in text  # shown, as JSON text
            _submit(browser, "#query", {"name": "received", "args": "[]"})
            _clean(browser)
            assert json.loads(browser.evaluate("document.querySelector('#query-answer').innerText")) == [SCRIPT, {"k": CLOSE}, ATTR]
            _submit(browser, "#query", {"name": SCRIPT + ATTR, "args": json.dumps([CLOSE])})
            _clean(browser)
            assert browser.evaluate("document.querySelector('#query [name=name]').value") == SCRIPT + ATTR  # kept as typed
            assert "unknown_query" in browser.evaluate("document.querySelector('#query-failure').innerText")
            browser.open(f"{base}/workflows?memo=" + urllib.parse.quote(f"k={SCRIPT}"))
            _clean(browser)
            browser.open(f"{base}/workflows?memo=" + urllib.parse.quote(f"a={ATTR}"))
            _clean(browser)
            assert browser.evaluate("document.querySelector('#filter [name=memo]').value") == f"a={ATTR}"
            browser.open(f"{base}/schedules/s-inject")
            _clean(browser)
            assert browser.evaluate("document.querySelector('#note').innerText") == CLOSE + ATTR
            browser.open(f"{base}/schedules")
            _clean(browser)
