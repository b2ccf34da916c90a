"""The web console's JSON API, /healthz and /metrics against a real supervisor with real
workflows; actions refused without the token; CURVE; the refusal of a non-loopback host."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq.auth

from _console import TOKEN, console_supervisor, get_json, post_form, post_json, request, wid_url
from _processes import RunningSupervisor, free_port, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One supervisor for the module: ``(supervisor, base url, client)``."""
    tmp = tmp_path_factory.mktemp("console-api")
    metrics_port = free_port()
    sup, base = console_supervisor(tmp, args=("--metrics-port", str(metrics_port)))
    with sup, Client(sup.endpoint, timeout=10) as client:
        sup.metrics_url = f"http://127.0.0.1:{metrics_port}"
        yield sup, base, client


def test_overview_healthz_and_metrics(served):
    sup, base, client = served
    overview = get_json(f"{base}/api/overview")
    assert overview["ready"] is True
    assert [shard["slot"] for shard in overview["shards"]] == [0, 1]
    assert sorted(shard["pid"] for shard in overview["shards"]) == sorted(sup.shard_pids)
    assert all(shard["alive"] and len(shard["engine_id"]) == 32 for shard in overview["shards"])
    assert set(overview["counts"]) >= {"running", "completed", "quarantined"}
    for url in (f"{base}/healthz", f"{sup.metrics_url}/healthz"):
        status, headers, body = request(url)
        assert status == 200 and headers["Content-Type"] == "application/json", url
        assert b'"ready": true' in body
    status, headers, body = request(f"{base}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert b'weft_shard_alive{slot="0"} 1' in body and b"# TYPE weft_supervisor_restarts counter" in body
    assert request(f"{base}/nope")[0] == 404


def test_list_is_newest_first_filtered_paged_and_counted(served):
    sup, base, client = served
    ids = [f"list-{i}" for i in range(5)]
    for wid in ids:
        client.start("echo", wid, id=wid).result(timeout=10)
        time.sleep(0.002)  # a distinct updated millisecond each
    failed = client.start("failing", "no", id="list-failed")
    with pytest.raises(Exception):
        failed.result(timeout=10)
    page = get_json(f"{base}/api/workflows?prefix=list-")
    assert [item["id"] for item in page["items"]] == ["list-failed", *reversed(ids)]
    assert page["counts"]["completed"] == 5 and page["counts"]["failed"] == 1 and page["total"] == 6
    assert page["cursor"] is None and page["items"][0]["updated_iso"].endswith("+00:00")
    assert [item["id"] for item in get_json(f"{base}/api/workflows?prefix=list-&status=failed")["items"]] == ["list-failed"]
    assert get_json(f"{base}/api/workflows?prefix=list-&type=failing")["total"] == 1
    assert get_json(f"{base}/api/workflows?status=quarantined")["items"] == []
    # Paging: two at a time, every one once, in the same order.
    seen, cursor = [], ""
    while True:
        page = get_json(f"{base}/api/workflows?prefix=list-&status=completed&limit=2&cursor={cursor}")
        seen += [item["id"] for item in page["items"]]
        cursor = page["cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    # A time range: nothing updated in the future; all of them since a minute ago.
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    assert get_json(f"{base}/api/workflows?prefix=list-&from={future}")["items"] == []
    assert get_json(f"{base}/api/workflows?prefix=list-&from={time.time() - 60:.0f}")["total"] == 6
    status, body = request(f"{base}/api/workflows?status=bogus")[0], request(f"{base}/api/workflows?limit=0")[2]
    assert status == 400 and b"limit" in body


def test_one_workflow_has_describe_with_iso_times_owner_children_and_traceback(served):
    sup, base, client = served
    client.start("parent", "kid-1", id="dad-1").result(timeout=10)
    dad = get_json(wid_url(base, "dad-1", api=True))
    assert dad["status"] == "completed" and dad["result"] == "parent of KID"
    assert dad["created_iso"].startswith(time.strftime("%Y-", time.gmtime())) and "T" in dad["created_iso"]
    assert [op["child_id"] for op in dad["history"] if op.get("child_id")] == ["kid-1"]
    assert get_json(wid_url(base, "kid-1", api=True))["parent"] == "dad-1"
    failing = client.start("failing", "broken on purpose", id="fails-1")
    wait_until(lambda: client.get_handle("fails-1").describe()["status"] == "failed", timeout=10)
    described = get_json(wid_url(base, failing.id, api=True))
    assert "broken on purpose" in described["error"]["message"] and "Traceback" in described["error"]["traceback"]
    running = client.start("waiter", "t", id="waits/1 <odd>")
    shown = wait_until(lambda: get_json(wid_url(base, running.id, api=True)), timeout=10)
    assert shown["id"] == "waits/1 <odd>" and shown["owner"] and shown["owner_shard"]["pid"] in sup.shard_pids
    assert request(wid_url(base, "no-such-workflow", api=True))[0] == 404


def test_actions_need_the_token_and_then_act(served):
    sup, base, client = served
    handle = client.start("waiter", "t", id="act-1")
    url = wid_url(base, handle.id, api=True)
    for token in (None, "wrong-token-wrong-token"):
        status, body = post_json(f"{url}/signal", {"name": "item", "payload": [1]}, token=token)
        assert status == 403, body
        assert post_form(f"{wid_url(base, handle.id)}/terminate", {"reason": "x", **({"token": token} if token else {})})[0] == 403
    time.sleep(0.3)  # had a refused action acted, the query would show it by now
    assert handle.query("received") == []
    assert client.get_handle(handle.id).describe()["status"] == "running"
    assert post_json(f"{url}/signal", {"name": "item", "payload": {"n": 1}}) == (200, {"ok": True, "id": "act-1", "action": "signal"})
    wait_until(lambda: handle.query("received") == [{"n": 1}], timeout=10)
    status, body = post_json(f"{url}/signal", {"name": "item", "payload": "x", "token": "no"}, token=None)
    assert status == 403
    status, body = post_json(f"{url}/retry", {})
    assert status == 400 and body["error"]["code"] == "invalid_request"  # not quarantined
    # The HTML form: a 303 back to the workflow's page, which says it was done.
    status, headers, _ = post_form(f"{wid_url(base, handle.id)}/terminate", {"token": TOKEN, "reason": "from the console"})
    assert status == 303 and headers["Location"] == "/workflows/act-1?done=terminate"
    described = get_json(url)
    assert described["status"] == "terminated" and described["error"]["message"] == "from the console"
    cancelled = client.start("waiter", "t", id="act-2")
    assert post_json(f"{wid_url(base, cancelled.id, api=True)}/cancel", {})[0] == 200
    wait_until(lambda: client.get_handle("act-2").describe()["status"] == "cancelled", timeout=10)
    status, headers, _ = post_form(f"{wid_url(base, 'act-2')}/signal", {"token": TOKEN, "name": "item", "payload": "{not json"})
    assert status == 303 and "error=" in headers["Location"]


def test_console_reads_through_curve_with_its_own_key(tmp_path):
    certs, full = tmp_path / "certs", tmp_path / "full"
    certs.mkdir(), full.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(certs), "server")
    sup, base = console_supervisor(tmp_path, shards=1, args=("--curve-secret-key", server_secret, "--curve-authorized-keys", str(full)))
    with sup:
        assert get_json(f"{base}/api/overview")["ready"] is True
        assert request(wid_url(base, "absent", api=True))[0] == 404  # a describe went through the front door
        assert list(full.iterdir()) == []  # the console's key is never written


def test_a_non_loopback_console_needs_curve_or_insecure_bind(tmp_path):
    command = [sys.executable, "-m", "weft_actors.supervisor", "--shards", "1", "--data", str(tmp_path / "d"),
               "--bind", f"tcp://127.0.0.1:{free_port()}", "--http", f"0.0.0.0:{free_port()}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "refusing to serve the console on 0.0.0.0" in done.stderr
    bad = subprocess.run([*command[:-1], "nonsense:port"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--http wants HOST:PORT" in bad.stderr


def test_bench_console_list_prints_its_json_line():
    bench = Path(__file__).resolve().parents[2] / "bench" / "console_list.py"
    done = subprocess.run([sys.executable, str(bench), "--workflows", "2000", "--repeat", "1"], capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout.strip())
    assert result["workflows"] == 2000 and result["page_html_ms_p50"] > 0
