"""The console in a real headless Chromium against a real supervisor: payloads in the history
and the query form (A4), actions only where they apply, a confirmed terminate and a refused
form kept as typed (B5), the schedules' pages and actions (B6), the list's run columns and a
lifted quarantine kept in the record (B7). Skipped only when no Chromium binary is found."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from _chromium import DevTools, dump_dom, find_chromium
from _console import TOKEN, console_supervisor, get_json, page_shot, post_form, post_json, wid_url
from _processes import RunningSupervisor, free_port, wait_until
from weft_actors import Client

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(find_chromium() is None, reason="no chromium binary (apt-get install -y chromium)"),
]

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-actions")
    sup, base = console_supervisor(tmp)
    with sup, Client(sup.endpoint, timeout=10) as client:
        ledger = client.start("ledger", "ann", id="l-1")
        ledger.signal("item", {"sku": "<b>x</b>", "qty": 2})
        ledger.signal("note", "gift wrap")
        assert ledger.update("add", 5) == 5
        ledger.signal("close", None)
        client.start("echo", "done", id="done-1").result(timeout=10)
        wait_until(lambda: any(op["name"] == "close" and op["outcome"] == "ok" for op in ledger.describe()["history"]), timeout=10)
        yield sup, base, client


def _table(dom: str, table_id: str) -> str:
    part = dom[dom.index(f'<table id="{table_id}">'):]
    return part[: part.index("</table>")]


def _submit(browser: DevTools, form: str, fields: dict[str, str], check: tuple[str, ...] = ()) -> None:
    """Fill ``form``'s fields, tick ``check``, click its button and wait for the next page."""
    script = [f"const f = document.querySelector({form!r}); window.__before = true;"]
    for name, value in fields.items():
        script.append(f"f.querySelector('[name={name}]').value = {json.dumps(value)};")
    for name in check:
        script.append(f"f.querySelector('[name={name}]').checked = true;")
    script.append("f.querySelector('button').click();")
    browser.evaluate("(() => {" + " ".join(script) + "})()")
    browser.wait_for("!window.__before && document.readyState === 'complete'")


def test_the_history_shows_signal_payloads_update_arguments_and_results_and_race_losers_are_neutral(served):
    _, base, _ = served
    dom = dump_dom(wid_url(base, "l-1"))
    history = _table(dom, "history")
    assert "<th>payload</th>" in history
    assert '"sku": "&lt;b&gt;x&lt;/b&gt;"' in history and "<b>x</b>" not in dom  # escaped, not markup
    assert '"gift wrap"' in history
    update = re.search(r"<tr><td>\d+</td><td>update</td><td>add</td>.*?</tr>", history, re.S)
    assert update and 'args <code class="payload">[\n  5\n]</code>' in update[0] and 'result <code class="payload">5</code>' in update[0]
    assert 'badge lost_race">lost_race</span>' in history  # the timer that lost to "close"
    assert "CancelledError" not in dom and 'class="badge error"' not in history


def test_the_query_form_shows_the_answer_or_the_error_with_the_form_kept(served):
    _, base, _ = served
    with DevTools() as browser:
        browser.open(wid_url(base, "l-1"))
        _submit(browser, "#query", {"name": "balance", "args": "[2]"})
        answer = json.loads(browser.evaluate("document.querySelector('#query-answer').innerText"))
        assert answer == {"owner": "ann", "total": 10, "notes": ["gift wrap"]}
        _submit(browser, "#query", {"name": "no-such", "args": "[]"})
        assert "unknown_query" in browser.evaluate("document.querySelector('#query-failure').innerText")
        assert browser.evaluate("document.querySelector('#query [name=name]').value") == "no-such"
        _submit(browser, "#query", {"name": "balance", "args": "{not json"})
        assert "must be a JSON array" in browser.evaluate("document.querySelector('#query-failure').innerText")
        assert browser.evaluate("document.querySelector('#query [name=args]').value") == "{not json"
    status, body = post_json(wid_url(base, "l-1", api=True) + "/query", {"name": "balance", "args": [3]}, token=None)
    assert status == 200 and body["answer"]["total"] == 15  # a read: no action token needed


def test_actions_apply_only_where_they_can(served):
    _, base, client = served
    done = dump_dom(wid_url(base, "done-1"))
    assert all(f'id="{form}"' not in done for form in ("cancel", "terminate", "signal", "retry"))
    assert 'id="no-actions">None: the workflow has finished (completed)' in done and 'id="query"' in done
    client.start("waiter", "t", id="run-1")
    running = dump_dom(wid_url(base, "run-1"))
    assert all(f'<form method="post" class="inline" id="{form}"' in running for form in ("cancel", "terminate", "signal"))
    assert 'id="retry"' not in running  # not quarantined


def test_terminate_asks_for_confirmation_and_a_refused_form_comes_back_as_typed(served):
    _, base, client = served
    handle = client.start("waiter", "t", id="run-2")
    with DevTools() as browser:
        browser.open(wid_url(base, "run-2"))
        # A wrong token: the page again, the error shown, the signal's fields as typed.
        _submit(browser, "#signal", {"token": "wrong-token-wrong-token", "name": "item", "payload": '{"k": 1}'})
        assert "signal refused: permission_denied" in browser.evaluate("document.querySelector('#signal-failure').innerText")
        assert browser.evaluate("document.querySelector('#signal [name=name]').value") == "item"
        assert browser.evaluate("document.querySelector('#signal [name=payload]').value") == '{"k": 1}'
        assert browser.evaluate("document.querySelector('#status').innerText") == "running"
        # Terminate: the browser will not send it unticked (no script involved).
        browser.evaluate(f"document.querySelector('#terminate [name=token]').value = {TOKEN!r}")
        assert browser.evaluate("document.querySelector('#terminate').checkValidity()") is False
        assert browser.evaluate("document.querySelector('#terminate [name=confirm]').validity.valueMissing") is True
        _submit(browser, "#terminate", {"token": TOKEN, "reason": "confirmed"}, check=("confirm",))
        assert browser.evaluate("location.search") == "?done=terminate"
        assert browser.evaluate("document.querySelector('#status').innerText") == "terminated"
        assert browser.evaluate("document.querySelector('#terminate')") is None  # finished: no more actions
    assert handle.query("received") == [] and handle.describe()["status"] == "terminated"
    # The server refuses an unticked form too (a page that is not the console's own).
    client.start("waiter", "t", id="run-3")
    status, _, body = post_form(f"{wid_url(base, 'run-3')}/terminate", {"token": TOKEN, "reason": "no tick"})
    assert status == 400 and b"confirm_missing" in body and b'value="no tick"' in body
    assert client.get_handle("run-3").describe()["status"] == "running"


def test_the_list_shows_start_end_duration_and_run_id(served):
    _, base, client = served
    dom = dump_dom(base + "/workflows?prefix=done-")
    table = _table(dom, "workflows")
    headers = re.findall(r"<th>(.*?)</th>", table)
    assert headers == ["id", "type", "status", "started", "ended", "duration", "updated", "run id"]
    cells = re.findall(r"<td>(.*?)</td>", re.search(r"<tr><td><a[^>]*>done-1</a>.*?</tr>", table)[0])
    run_id = client.get_handle("done-1").describe()["run_id"]
    assert re.fullmatch(ISO, cells[3]) and re.fullmatch(ISO, cells[4]) and re.fullmatch(r"\d+ ms|\d+\.\d\d s", cells[5])
    assert cells[7] == f"<code>{run_id}</code>"
    running = _table(dump_dom(base + "/workflows?prefix=l-1"), "workflows")
    cells = re.findall(r"<td>(.*?)</td>", running)
    assert re.fullmatch(ISO, cells[3]) and cells[4] == "" and cells[5]  # still going: no end, a duration so far


def test_a_schedule_has_its_page_with_its_actions(served, tmp_path):
    _, base, client = served
    client.create_schedule("s-hourly", "echo", "tick", spec={"every": 3600}, overlap="skip")
    listing = dump_dom(base + "/schedules")
    assert '<a href="/schedules/s-hourly">s-hourly</a>' in listing
    url = base + "/schedules/s-hourly"
    with DevTools() as browser:
        browser.open(url)
        assert browser.evaluate("document.querySelector('#overlap').innerText") == "skip"
        assert browser.evaluate("document.querySelector('#timezone').innerText") == "UTC"
        assert '"every": 3600' in browser.evaluate("document.querySelector('#spec').innerText")
        assert browser.evaluate("document.querySelectorAll('.next').length") == 5
        _submit(browser, "#trigger", {"token": TOKEN})
        assert browser.evaluate("document.querySelector('#notice').innerText") == "trigger: done"
        _submit(browser, "#pause", {"token": TOKEN, "note": "<i>maintenance</i>"})
        assert browser.evaluate("document.querySelector('#state').innerText") == "paused"
        assert browser.evaluate("document.querySelector('#note').innerText") == "<i>maintenance</i>"  # text, not markup
        assert browser.evaluate("document.querySelector('#pause')") is None and browser.evaluate("document.querySelector('#unpause') !== null")
        _submit(browser, "#unpause", {"token": TOKEN, "note": ""})
        assert browser.evaluate("document.querySelector('#state').innerText") == "active"
        # A refused backfill (its end before its start): the page again, the times as typed.
        _submit(browser, "#backfill", {"token": TOKEN, "start": "2025-01-01T02:00:00Z", "end": "2025-01-01T00:00:00Z"})
        assert "backfill end is before its start" in browser.evaluate("document.querySelector('#failure').innerText")
        assert browser.evaluate("document.querySelector('#backfill [name=start]').value") == "2025-01-01T02:00:00Z"
        _submit(browser, "#backfill", {"token": TOKEN, "start": "2025-01-01T00:00:00Z", "end": "2025-01-01T01:30:00Z"})
        assert browser.evaluate("document.querySelector('#notice').innerText") == "backfill: done"
        deadline = time.monotonic() + 20
        while True:  # the runs complete: the page shows each with its status
            browser.open(url)
            statuses = browser.evaluate("[...document.querySelectorAll('#recent-runs td:nth-child(3)')].map(c => c.innerText)")
            if statuses == ["completed"] * 3:
                break
            assert time.monotonic() < deadline, statuses
            time.sleep(0.2)
        assert "fired 3" in browser.evaluate("document.querySelector('#counts').innerText")
        assert browser.evaluate("document.querySelector('#recent-runs').innerText").count("\t2025-01-01T0") == 2  # the backfilled fire times
        page_shot(url, "schedule", tmp_path)
        _submit(browser, "#delete", {"token": TOKEN})
        assert browser.evaluate("document.querySelector('#state').innerText") == "deleted"
        assert browser.evaluate("document.querySelector('#no-actions') !== null")
    # Its workflow's page shows its internal races as neutral, never as failures.
    dom = dump_dom(wid_url(base, "s-hourly"))
    assert "lost the race" not in dom and "CancelledError" not in dom
    assert 'class="badge error"' not in _table(dom, "history")
    # A workflow that is no schedule has no schedule page, and its actions are refused.
    assert b"schedule &#x27;done-1&#x27; not found" in post_form(f"{base}/schedules/done-1/trigger", {"token": TOKEN})[2]


@pytest.mark.timeout(150)
def test_a_lifted_quarantine_stays_in_the_record(tmp_path):
    token_file = tmp_path / "console.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ("--http", f"127.0.0.1:{port}", "--http-token-file", str(token_file), "--heartbeat", "0.2", "--ttl", "1.0")
    flag = tmp_path / "fixed"
    with RunningSupervisor(tmp_path / "data", app="quarantine_app", args=args) as sup, Client(sup.endpoint, timeout=5) as client:
        client.start("poisoned", str(flag), 2.5, id="poison", if_exists="return")

        def status() -> str | None:
            try:
                return client.get_handle("poison").describe()["status"]
            except Exception:  # routed to a shard stalled or restarting right now
                return None

        wait_until(lambda: status() == "quarantined", timeout=60, what="quarantined", interval=0.2)
        flag.write_text("deployed")
        with DevTools() as browser:
            browser.open(wid_url(base, "poison"))
            assert browser.evaluate("document.querySelector('#retry') !== null")  # quarantined: it applies
            _submit(browser, "#retry", {"token": TOKEN, "reason": "fixed in v2 <b>"})
            assert browser.evaluate("location.search") == "?done=retry"
        wait_until(lambda: status() == "completed", timeout=30, what="completed after the lift", interval=0.2)
        (lift,) = client.get_handle("poison").describe()["quarantine_lifts"]
        assert lift["by"] == "console 127.0.0.1" and lift["reason"] == "fixed in v2 <b>" and re.fullmatch(ISO, lift["at_iso"])
        assert lift["quarantined_for"] == "op #0 activity 'blocks_unless_fixed'"
        lifts = _table(dump_dom(wid_url(base, "poison")), "lifts")
        assert "console 127.0.0.1" in lifts and "fixed in v2 &lt;b&gt;" in lifts and "blocks_unless_fixed" in lifts
        assert get_json(wid_url(base, "poison", api=True))["quarantine_lifts"][0]["reason"] == "fixed in v2 <b>"


def test_a_payload_of_a_type_a_client_does_not_know_costs_that_payload_only(served):
    from console_app import Parcel  # registered here and in the app's processes

    sup, base, client = served
    handle = client.start("waiter", "t", id="parcel-1")
    handle.signal("item", Parcel("fragile", 750))
    wait_until(lambda: any(op["name"] == "item" and op["outcome"] == "ok" for op in handle.describe()["history"]), timeout=10)
    assert next(op for op in handle.describe()["history"] if op["name"] == "item")["payload"] == Parcel("fragile", 750)
    assert "Parcel(label='fragile', grams=750)" in _table(dump_dom(wid_url(base, "parcel-1")), "history")
    # A client that never imported the app: that payload is an error, the rest of the answer is there.
    script = (
        "import json, sys; from weft_actors import Client\n"
        "with Client(sys.argv[1], timeout=10) as c: d = c.get_handle('parcel-1').describe()\n"
        "print(json.dumps({'status': d['status'], 'item': [op for op in d['history'] if op['name'] == 'item'][0]}, default=repr))"
    )
    done = subprocess.run([sys.executable, "-c", script, sup.endpoint], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["status"] == "running" and seen["item"]["payload"] is None and "Parcel" in seen["item"]["payload_error"]
