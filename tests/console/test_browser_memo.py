"""The Workflows page's memo filter in a real headless Chromium against a real supervisor: typed
into the form, kept by the next-page link, refused with a clear message when no index holds it."""

from __future__ import annotations

import json

import pytest

from _chromium import DevTools, find_chromium
from _console import console_supervisor, request
from weft_actors import Client

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(find_chromium() is None, reason="no chromium binary (apt-get install -y chromium)"),
]

MEMOS = {
    "mb-1": {"customer": "acme", "region": "eu"},
    "mb-2": {"customer": "bolt", "region": "eu"},
    "mb-3": {"customer": "acme", "region": "us"},
    "mb-4": {"customer": "acme", "region": "eu", "note": "a, b"},
    "mb-5": None,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    sup, base = console_supervisor(tmp_path_factory.mktemp("console-memo"))
    with sup, Client(sup.endpoint, timeout=10) as client:
        for wid, memo in MEMOS.items():
            client.start("echo", wid, id=wid, memo=memo).result(timeout=10)
        yield base


def _listed(browser: DevTools) -> list[str]:
    return browser.evaluate("[...document.querySelectorAll('table a[href^=\"/workflows/\"]')].map(a => a.innerText)")


def test_the_memo_filter_is_typed_in_the_form_and_kept_by_the_next_page(served):
    with DevTools() as browser:
        browser.open(served + "/workflows")
        assert sorted(_listed(browser)) == sorted(MEMOS)
        browser.evaluate(
            "(() => { const f = document.querySelector('#filter');"
            " f.querySelector('[name=memo]').value = 'customer=acme';"
            " f.querySelector('[name=limit]').value = '2';"
            " f.querySelector('button').click(); })()"
        )
        browser.wait_for("location.search.includes('memo=customer') && document.readyState === 'complete' && !!document.querySelector('#next')")
        first = _listed(browser)
        assert first == ["mb-4", "mb-3"]  # newest first, acme only
        assert browser.evaluate("document.querySelector('#filter [name=memo]').value") == "customer=acme"
        assert "memo=customer%3Dacme" in browser.evaluate("document.querySelector('#next').getAttribute('href')")
        browser.evaluate("document.querySelector('#next').click()")
        browser.wait_for("location.search.includes('cursor=') && document.readyState === 'complete'")
        assert _listed(browser) == ["mb-1"]  # the filter went along
        assert browser.evaluate("document.querySelector('#next')") is None
        # Two fields: both must match; a quoted value may hold a comma.
        browser.open(served + "/workflows?memo=" + "region%3Deu%2C%20note%3D%22a%2C%20b%22")
        assert _listed(browser) == ["mb-4"]
        browser.open(served + "/workflows?memo=customer%3Dnobody")
        assert browser.evaluate("document.querySelector('#empty').innerText") == "No workflow matches."
        browser.open(served + "/workflows?memo=region%3D%7B%22a%22%3A1%7D")
        shown = browser.evaluate("document.body.innerText")
        assert "Error 400" in shown and "invalid_request" in shown and "nested values" in shown


def test_the_json_api_takes_the_same_filter(served):
    status, _, body = request(served + "/api/workflows?memo=customer%3Dacme%2Cregion%3Deu")
    assert status == 200
    assert [item["id"] for item in json.loads(body)["items"]] == ["mb-4", "mb-1"]
    status, _, body = request(served + "/api/workflows?memo=price%3D1.5")
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_request"
