"""The console's "what is it doing now" parts in a real headless Chromium against a real
supervisor (``ops_app``): a retried activity's last failure on the workflow page, the stack
trace behind its button, and a ``stuck`` workflow (a deploy whose replay diverges) counted on
the overview, offered by the list's status filter and explained on its page."""

from __future__ import annotations

from pathlib import Path

import pytest

from _chromium import DevTools, dump_dom, find_chromium
from _console import TOKEN, page_shot, wid_url
from _processes import RunningSupervisor, free_port, wait_until
from weft_actors import Client

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(find_chromium() is None, reason="no chromium binary (apt-get install -y chromium)"),
]


def _supervisor(tmp_path: Path, port: int, variant: str) -> RunningSupervisor:
    token_file = tmp_path / "console.token"
    token_file.write_text(TOKEN + "\n")
    return RunningSupervisor(
        tmp_path / "data", shards=2, app="ops_app", env={"WEFT_OPS_APP_VARIANT": variant},
        args=("--http", f"127.0.0.1:{port}", "--http-token-file", str(token_file), "--heartbeat", "0.2", "--ttl", "0.6"),
    )


def test_workflow_page_shows_pending_activities_last_failure_and_stack_and_stuck_is_counted_and_filtered(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with _supervisor(tmp_path, port, "1") as sup, Client(sup.endpoint, timeout=10) as client:
        client.start("shifting", id="sh-1")
        wait_until(lambda: any(op["outcome"] == "ok" for op in client.get_handle("sh-1").describe()["history"]), what="first step")
        client.start("retrying", 3, id="flaky-1")
        wait_until(lambda: client.get_handle("flaky-1").describe()["pending_activities"][0]["state"] == "retry_wait", what="a retry")
        with DevTools() as browser:
            browser.open(wid_url(base, "flaky-1"))
            cells = browser.evaluate("[...document.querySelectorAll('#pending-activities td')].map(td => td.innerText)")
            assert cells[:4] == ["0", "flaky", "retry_wait", "2"]
            assert cells[-1] == "RuntimeError: downstream said no for 3"
            assert cells[-2].startswith("shard ") and ", pid " in cells[-2]
            browser.evaluate("document.querySelector('.last-failure summary').click()")
            assert "raise RuntimeError" in browser.evaluate("document.querySelector('.last-failure pre').innerText")
            # The stack trace is behind a button: hidden until it is pressed.
            assert browser.evaluate("document.querySelector('#stack-trace').checkVisibility()") is False
            browser.evaluate("document.querySelector('#show-stack').click()")
            browser.wait_for("document.querySelector('#stack-trace').checkVisibility()")
            trace = browser.evaluate("document.querySelector('#stack-trace').innerText")
            assert "ops_app.py" in trace and "in retrying" in trace
            assert "waits on activity 'flaky' attempt 2" in trace and "retries at" in trace
        page_shot(wid_url(base, "flaky-1"), "workflow-live", tmp_path)
        assert sup.terminate() == 0
    with _supervisor(tmp_path, port, "2") as sup, Client(sup.endpoint, timeout=10) as client:  # the diverging deploy
        wait_until(lambda: client.get_handle("sh-1").describe()["status"] == "stuck", timeout=20, what="stuck")
        overview = dump_dom(base + "/")
        assert "stuck</span> 1" in overview
        listed = dump_dom(base + "/workflows?status=stuck")
        assert '<option value="stuck" selected="">' in listed or '<option value="stuck" selected>' in listed
        assert ">sh-1</a>" in listed and "flaky-1" not in listed
        page = dump_dom(wid_url(base, "sh-1"))
        assert 'id="status"><span class="badge stuck">stuck' in page
        assert "replay issued sleep at #0 but the history has activity" in page
        assert "No stack: none of its code is running." in page
