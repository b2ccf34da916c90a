"""The web console in a real headless Chromium against a real supervisor: what each of the
three pages shows, and one action (terminate) through the browser-rendered form, driven over
the DevTools protocol. Skipped only when no Chromium binary can be found.

``WEFT_UPDATE_SCREENSHOTS=1`` also writes the three pages' screenshots to ``docs/``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from _chromium import DevTools, dump_dom, find_chromium, screenshot
from _console import TOKEN, console_supervisor, wid_url
from _processes import wait_until
from weft_actors import Client

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(find_chromium() is None, reason="no chromium binary (apt-get install -y chromium)"),
]

DOCS = Path(__file__).resolve().parents[2] / "docs"
ODD = "b-<i>odd</i> & \"quoted\""
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-browser")
    sup, base = console_supervisor(tmp)
    with sup, Client(sup.endpoint, timeout=10) as client:
        for i in range(3):
            client.start("echo", f"order {i}", id=f"b-order-{i}").result(timeout=10)
        client.start("parent", "b-kid", id="b-parent").result(timeout=10)
        client.start("failing", "card declined", id="b-failing")
        client.start("waiter", "t", id="b-waiting")
        client.start("waiter", "t", id=ODD)
        client.start("chain", 2, id="b-chain").result(timeout=10)
        client.start("timed", "order 7", id="b-timed")
        wait_until(lambda: client.get_handle("b-failing").describe()["status"] == "failed", timeout=10)
        wait_until(lambda: [t["kind"] for t in client.get_handle("b-timed").describe()["timers"]] == ["signal"], timeout=10)
        wait_until(lambda: all("loop_lag_ms" in shard for shard in client.stats()["shards"]), timeout=10)
        yield sup, base, client


def test_overview_page_shows_shards_readiness_and_totals(served):
    sup, base, _ = served
    dom = dump_dom(base + "/")
    assert "<h1>Overview</h1>" in dom and 'id="ready"><span class="badge yes">yes' in dom
    for pid in sup.shard_pids:
        assert f"<td>{pid}</td>" in dom
    for column in ("engine id", "alive", "restarts", "live actors", "parked actors", "claims", "commits/s", "loop lag (ms)"):
        assert f"<th>{column}</th>" in dom
    # Every shard's row has its loop lag, a number, under that column.
    shards = dom[dom.index('<table id="shards">'):]
    shards = shards[: shards.index("</table>")]
    headers = re.findall(r"<th>(.*?)</th>", shards)
    for row in re.findall(r"<tr><td>.*?</tr>", shards):
        cells = re.findall(r"<td>(.*?)</td>", row)
        assert float(cells[headers.index("loop lag (ms)")]) >= 0
    assert "completed</span> 6" in dom and "failed</span> 1" in dom and "quarantined</span> 0" in dom
    # By type: each type's counts by status, links into the list.
    by_type = dom[dom.index('<table id="by-type">'):]
    assert '<a href="/workflows?type=echo&amp;status=completed">4</a>' in by_type[: by_type.index("</table>")]


def test_workflows_page_lists_newest_first_with_filters(served):
    _, base, _ = served
    dom = dump_dom(base + "/workflows?prefix=b-order-")
    rows = [dom.index(f">b-order-{i}</a>") for i in range(3)]
    assert rows == sorted(rows, reverse=True)  # the newest (started last) first
    assert '<select name="status">' in dom and '<option value="quarantined">' in dom
    assert "3 match the type, id and time filters" in dom
    failed = dump_dom(base + "/workflows?status=failed")
    assert ">b-failing</a>" in failed and "b-order-0" not in failed
    assert ">b-&lt;i&gt;odd&lt;/i&gt; &amp; " in dump_dom(base + "/workflows?prefix=b-%3C")  # escaped, not markup


def test_workflow_page_shows_describe_links_and_traceback(served):
    sup, base, _ = served
    failing = dump_dom(wid_url(base, "b-failing"))
    assert 'id="status"><span class="badge failed">failed' in failing
    assert "card declined" in failing and 'id="traceback">Traceback' in failing
    assert re.search(f'<dt>created</dt><dd><span id="created">{ISO}</span>', failing)
    assert re.search(f'<dt>ended</dt><dd><span id="ended">{ISO}</span>', failing)
    assert '<dt>input</dt><dd><pre id="input">[\n  "card declined"\n]</pre>' in failing
    assert "<dt>type</dt><dd><span id=\"type\">failing</span>" in failing
    parent = dump_dom(wid_url(base, "b-parent"))
    assert '<a href="/workflows/b-kid">b-kid</a>' in parent and "<td>child</td>" in parent
    assert '<a href="/workflows/b-parent">b-parent</a>' in dump_dom(wid_url(base, "b-kid"))
    odd = dump_dom(wid_url(base, ODD))
    assert "<i>odd</i>" not in odd and "&lt;i&gt;odd&lt;/i&gt;" in odd
    owner = re.search(r'<span id="owner-shard">shard (\d), pid (\d+)</span>', odd)  # the owner's shard
    assert owner and int(owner[1]) in (0, 1) and int(owner[2]) == sup.shard_pids[int(owner[1])]
    assert "<dt>ended</dt><dd>not yet</dd>" in odd
    assert TOKEN not in odd  # the server never writes the token into a page
    chain = dump_dom(wid_url(base, "b-chain"))
    runs = chain[chain.index('<table id="previous-runs">'):]
    assert len(re.findall(f'<span class="badge continued">continued</span></td><td>{ISO}</td>', runs[: runs.index("</table>")])) == 2


def test_workflow_page_shows_the_timeline_with_op_times_and_the_pending_timers(served):
    _, base, _ = served
    dom = dump_dom(wid_url(base, "b-timed"))
    history = dom[dom.index('<table id="history">'):]
    history = history[: history.index("</table>")]
    headers = re.findall(r"<th>(.*?)</th>", history)
    assert headers[:9] == ["seq", "kind", "name", "outcome", "attempts", "started", "ended", "duration", "timeline"]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr><td>.*?</tr>", history)]
    shout, nap, wait = rows
    assert shout[1:5] == ["activity", "shout", '<span class="badge ok">ok</span>', "1"]
    assert re.fullmatch(ISO, shout[5]) and re.fullmatch(ISO, shout[6]) and re.fullmatch(r"\d+ ms", shout[7])
    assert nap[1] == "sleep" and re.fullmatch(r"\d+ ms", nap[7]) and int(nap[7].split()[0]) >= 50
    assert wait[1:4] == ["signal", "go", '<span class="badge pending">pending</span>'] and re.fullmatch(ISO, wait[5]) and wait[6:8] == ["", ""]
    assert all('class="bar ' in row[8] for row in rows)  # each op's bar on the timeline
    timers = dom[dom.index('<table id="timers">'):]
    assert re.search(f"<tr><td>signal</td><td>2</td><td>{ISO}</td></tr>", timers[: timers.index("</table>")])
    assert '<pre id="input">[\n  "order 7"\n]</pre>' in dom


def test_screenshots_of_the_three_pages(served, tmp_path):
    _, base, _ = served
    pages = {"overview": base + "/", "workflows": base + "/workflows", "workflow": wid_url(base, "b-timed")}
    for name, url in pages.items():
        path = tmp_path / f"console-{name}.png"
        screenshot(url, path)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
        if os.environ.get("WEFT_UPDATE_SCREENSHOTS"):
            shutil.copyfile(path, DOCS / path.name)


def test_terminate_through_the_rendered_form(served):
    _, base, client = served
    url = wid_url(base, "b-waiting")
    with DevTools() as browser:
        browser.open(url)
        browser.evaluate(
            "(() => { const f = document.querySelector('#terminate');"
            f" f.querySelector('[name=token]').value = {TOKEN!r};"
            " f.querySelector('[name=reason]').value = 'ended from the browser';"
            " f.querySelector('[name=confirm]').checked = true;"
            " f.querySelector('button').click(); })()"
        )
        browser.wait_for("location.search === '?done=terminate' && document.readyState === 'complete'")
        assert browser.evaluate("document.querySelector('#status').innerText") == "terminated"
        assert "ended from the browser" in browser.evaluate("document.querySelector('#error').innerText")
        assert browser.evaluate("document.querySelector('#notice').innerText") == "terminate: done"
        # The token is remembered for the tab: the next page's forms carry it already.
        browser.open(wid_url(base, ODD))
        assert browser.evaluate("document.querySelector('#cancel [name=token]').value") == TOKEN
    assert client.get_handle("b-waiting").describe()["status"] == "terminated"


def test_schedules_page_renders_each_schedule_and_links_its_workflow(served):
    _, base, client = served
    client.create_schedule("b-weekly", "echo", "week", spec={"cron": "0 6 * * mon"}, overlap="skip", paused=True, note="<b>not yet</b>")
    dom = dump_dom(base + "/schedules")
    assert "<h1>Schedules</h1>" in dom and '<a href="/schedules">Schedules</a>' in dom
    row = re.search(r'<tr><td><a href="/schedules/b-weekly">b-weekly</a></td>(.*?)</tr>', dom)
    assert row, dom[-2000:]
    assert 'badge paused">paused</span> &lt;b&gt;not yet&lt;/b&gt;' in row[1]  # the note escaped
    assert "<td>echo</td><td>cron 0 6 * * mon (UTC)</td><td>skip</td><td>-</td>" in row[1]  # paused: no next fire
    client.get_schedule("b-weekly").delete()
