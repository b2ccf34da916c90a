"""The console's new surfaces (the query form, signals, the memo filter, schedule pages) as a
hostile user drives them over real HTTP against a real supervisor: input no parser reads is a
400 with a stable code for that request alone, never a 500 with a traceback in the log; what a
page shows is bounded; an unknown schedule is said to be one."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Iterator

import pytest

from _console import TOKEN, console_supervisor, post_form, request, wid_url
from _processes import RunningSupervisor
from weft_actors import Client
from weft_actors.errors import QueryFailed
from weft_actors.console._workflow_actions import ANSWER_SHOWN

pytestmark = pytest.mark.timeout(90)

DEEP = "[" * 50_000 + "]" * 50_000


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningSupervisor, str]]:
    sup, base = console_supervisor(tmp_path_factory.mktemp("hostile"), shards=1)
    sup.command[sup.command.index("--app") + 1] = "review_app"
    with sup, Client(sup.endpoint, timeout=30) as client:
        client.start("sink", id="sink-1")
        yield sup, base


def _error(raw: bytes) -> dict[str, str]:
    return json.loads(raw)["error"]


def test_json_nested_too_deeply_is_a_bad_request_not_a_server_error(console: tuple[RunningSupervisor, str]) -> None:
    sup, base = console
    api = wid_url(base, "sink-1", api=True)
    status, _, raw = request(f"{api}/query", data=('{"name": "got", "args": ' + DEEP + "}").encode(), headers={"Content-Type": "application/json"})
    assert status == 400 and _error(raw)["code"] == "invalid_request" and "nested too deeply" in _error(raw)["message"]
    status, _, raw = post_form(f"{wid_url(base, 'sink-1')}/query", {"name": "got", "args": DEEP})
    assert status == 400 and b"nested too deeply" in raw and b'id="query-failure"' in raw
    status, _, raw = post_form(f"{wid_url(base, 'sink-1')}/signal", {"name": "s", "payload": DEEP, "token": TOKEN})
    assert status == 400 and b"nested too deeply" in raw
    memo = urllib.parse.quote("k=" + "[" * 3000 + "]" * 3000)
    status, _, raw = request(f"{base}/api/workflows?memo={memo}")
    assert status == 400 and _error(raw)["code"] == "invalid_request"
    assert request(f"{base}/workflows?memo={memo}")[0] == 400
    with Client(sup.endpoint, timeout=10) as client:
        assert client.get_handle("sink-1").query("got") == []  # nothing reached the workflow
    assert "Traceback" not in sup.log_text() and "console request" not in sup.log_text()


def test_a_huge_query_answer_is_cut_on_the_page_and_whole_in_the_api(console: tuple[RunningSupervisor, str]) -> None:
    _, base = console
    size = 600_000
    status, _, raw = post_form(f"{wid_url(base, 'sink-1')}/query", {"name": "big", "args": f"[{size}]"})
    page = raw.decode()
    assert status == 200 and 'id="query-answer-cut"' in page
    assert ANSWER_SHOWN <= page.count("y") < ANSWER_SHOWN + 1000 and len(raw) < 200_000
    status, _, raw = request(f"{wid_url(base, 'sink-1', api=True)}/query", data=json.dumps({"name": "big", "args": [size]}).encode(), headers={"Content-Type": "application/json"})
    assert status == 200 and json.loads(raw)["answer"] == "y" * size
    status, _, raw = post_form(f"{wid_url(base, 'sink-1')}/query", {"name": "big", "args": "[10]"})
    assert status == 200 and "y" * 10 in raw.decode() and b"query-answer-cut" not in raw


def test_an_unknown_schedule_is_said_to_be_a_schedule(console: tuple[RunningSupervisor, str]) -> None:
    _, base = console
    for url in (f"{base}/api/schedules/no-such", f"{base}/schedules/no-such"):
        status, _, raw = request(url)
        assert status == 404 and b"schedule 'no-such' not found" in raw.replace(b"&#x27;", b"'"), raw[:300]
    status, _, raw = request(f"{base}/api/schedules/no-such/pause", data=b"{}", headers={"Content-Type": "application/json", "X-Weft-Token": TOKEN})
    assert status == 404 and _error(raw) == {"status": 404, "code": "workflow_not_found", "message": "workflow_not_found: schedule 'no-such' not found"}


def test_a_query_handler_that_raises_is_a_query_failure_not_an_internal_error(console: tuple[RunningSupervisor, str]) -> None:
    sup, base = console
    api = wid_url(base, "sink-1", api=True)
    for body, raised in (({"name": "boom"}, "RuntimeError"), ({"name": "got", "args": [1, 2]}, "TypeError")):
        status, _, raw = request(f"{api}/query", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        assert status == 409 and _error(raw)["code"] == "query_failed" and f"raised {raised}" in _error(raw)["message"], raw
    status, _, raw = post_form(f"{wid_url(base, 'sink-1')}/query", {"name": "boom"})
    page = raw.decode()
    assert status == 409 and 'id="query-failure"' in page and "query_failed" in page and "<b>the handler" not in page
    with Client(sup.endpoint, timeout=10) as client:
        with pytest.raises(QueryFailed) as failed:
            client.get_handle("sink-1").query("boom")
        assert failed.value.code == "query_failed" and failed.value.context["type"] == "RuntimeError"
        assert "_boom" in failed.value.context["traceback"]
        assert client.get_handle("sink-1").describe()["status"] == "running"  # nothing changed
    assert "internal error" not in sup.log_text() and "Traceback" not in sup.log_text()


def test_every_new_post_checks_the_origin_and_the_schedule_actions_the_token(console: tuple[RunningSupervisor, str]) -> None:
    sup, base = console
    with Client(sup.endpoint, timeout=10) as client:
        client.create_schedule("s-guarded", "sink", spec={"every": 3600})
        posts = [(f"{wid_url(base, 'sink-1', api=True)}/query", {"name": "got"}), (f"{wid_url(base, 'sink-1', api=True)}/retry", {"reason": "x"})]
        posts += [(f"{base}/api/schedules/s-guarded/{action}", {"start": "0", "end": "1"}) for action in ("pause", "unpause", "trigger", "backfill", "delete")]
        for url, body in posts:
            headers = {"Content-Type": "application/json", "X-Weft-Token": TOKEN, "Origin": "http://attacker.example"}
            status, _, raw = request(url, data=json.dumps(body).encode(), headers=headers)
            assert status == 403 and _error(raw)["code"] == "origin_not_allowed", url
        for action in ("pause", "trigger", "delete"):
            for token in ("wrong-token-wrong-token", None):
                headers = {"Content-Type": "application/json", **({"X-Weft-Token": token} if token else {})}
                status, _, raw = request(f"{base}/api/schedules/s-guarded/{action}", data=b"{}", headers=headers)
                assert status == 403 and _error(raw)["code"] == "permission_denied", (action, token)
            status, _, page = post_form(f"{base}/schedules/s-guarded/{action}", {"token": "wrong-token-wrong-token"})
            assert status == 403 and b"permission_denied" in page
        described = client.get_schedule("s-guarded").describe()
        assert described["paused"] is False and described["deleted"] is False and described["fired"] == 0
