"""The web console's JSON API, /healthz and /metrics against a real supervisor with real
workflows; actions refused without the token; CURVE; the refusal of a non-loopback host."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import zmq.auth

from _console import TOKEN, console_supervisor, get_json, post_form, post_json, request, wid_url
from _processes import RunningSupervisor, free_port, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def json_once(url: str, ready: Callable[[Any], Any], timeout: float = 10.0) -> Any:
    """``GET url`` as JSON, polled until ``ready(answer)`` holds."""
    return wait_until(lambda: (lambda answer: answer if ready(answer) else None)(get_json(url)), timeout=timeout, what=f"{url} ready")


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
    client.start("echo", "counted", id="overview-echo").result(timeout=10)
    # Each shard reports its figures once a second: wait for a report after the workflow.
    overview = json_once(f"{base}/api/overview", lambda found: all("loop_lag_ms" in shard for shard in found["shards"]))
    assert overview["ready"] is True
    assert [shard["slot"] for shard in overview["shards"]] == [0, 1]
    assert sorted(shard["pid"] for shard in overview["shards"]) == sorted(sup.shard_pids)
    assert all(shard["alive"] and len(shard["engine_id"]) == 32 for shard in overview["shards"])
    assert all(0 <= shard["loop_lag_ms"] < 1000 for shard in overview["shards"])  # each shard's loop lag
    assert set(overview["counts"]) >= {"running", "completed", "quarantined"}
    # The counts the store keeps, by type and status, and by status over every type.
    echo = {entry["status"]: entry["count"] for entry in overview["workflows"] if entry["type"] == "echo"}
    assert echo.get("completed", 0) >= 1
    assert overview["counts"]["completed"] == sum(entry["count"] for entry in overview["workflows"] if entry["status"] == "completed")
    for url in (f"{base}/healthz", f"{sup.metrics_url}/healthz"):
        status, headers, body = request(url)
        assert status == 200 and headers["Content-Type"] == "application/json", url
        assert b'"ready": true' in body
    status, headers, body = request(f"{base}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert b'weft_shard_alive{slot="0"} 1' in body and b"# TYPE weft_supervisor_restarts counter" in body
    assert f'weft_workflows{{type="echo",status="completed"}} {echo["completed"]}'.encode() in body
    assert b'weft_workflows{type="echo",status="quarantined"} 0' in body and b'weft_shard_loop_lag_ms{slot="1"} ' in body
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
    assert page["cursor"] is None and ISO.match(page["items"][0]["updated_iso"])
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
    assert dad["status"] == "completed" and dad["result"] == "parent of KID" and dad["input"] == ["kid-1"]
    assert dad["created_iso"].startswith(time.strftime("%Y-", time.gmtime())) and ISO.match(dad["created_iso"])
    assert ISO.match(dad["updated_iso"]) and dad["ended"] == dad["updated"] and dad["ended_iso"] == dad["updated_iso"]
    assert [op["child_id"] for op in dad["history"] if op.get("child_id")] == ["kid-1"]
    (child_op,) = dad["history"]
    assert dad["created"] <= child_op["started"] <= child_op["ended"] <= dad["ended"]
    assert child_op["duration"] == pytest.approx(child_op["ended"] - child_op["started"])
    assert ISO.match(child_op["started_iso"]) and ISO.match(child_op["ended_iso"])
    kid = get_json(wid_url(base, "kid-1", api=True))
    assert kid["parent"] == "dad-1" and kid["input"] == ["kid"]
    assert [(op["kind"], op["name"], op["outcome"], op["attempts"]) for op in kid["history"]] == [("activity", "shout", "ok", 1)]
    assert kid["history"][0]["started"] <= kid["history"][0]["ended"]
    failing = client.start("failing", "broken on purpose", id="fails-1")
    wait_until(lambda: client.get_handle("fails-1").describe()["status"] == "failed", timeout=10)
    described = get_json(wid_url(base, failing.id, api=True))
    assert "broken on purpose" in described["error"]["message"] and "Traceback" in described["error"]["traceback"]
    running = client.start("waiter", "t", id="waits/1 <odd>")
    shown = wait_until(lambda: get_json(wid_url(base, running.id, api=True)), timeout=10)
    assert shown["id"] == "waits/1 <odd>" and shown["owner"] and shown["owner_shard"]["pid"] in sup.shard_pids
    assert request(wid_url(base, "no-such-workflow", api=True))[0] == 404
    # The owner's shard, as the supervisor's own figures name the engine's slot and pid.
    shard = next(shard for shard in get_json(f"{base}/api/overview")["shards"] if shard["engine_id"] == shown["owner"])
    assert shown["owner_shard"] == {"slot": shard["slot"], "pid": shard["pid"], "state": "live"}


def test_one_workflow_shows_its_pending_timers_and_previous_runs(served):
    sup, base, client = served
    before = time.time()
    client.start("timed", "tick", id="timed-1")
    url = wid_url(base, "timed-1", api=True)
    shown = json_once(url, lambda found: [t["kind"] for t in found["timers"]] == ["signal"])  # after the sleep
    ((timer),) = shown["timers"]
    assert (timer["kind"], timer["seq"]) == ("signal", 2) and before + 3600 <= timer["fire_at"] <= time.time() + 3600
    assert ISO.match(timer["fire_at_iso"])
    activity, nap, wait = shown["history"]
    assert (activity["kind"], nap["kind"], wait["kind"]) == ("activity", "sleep", "signal")
    assert nap["duration"] >= 0.05 and nap["started"] >= activity["ended"]
    assert wait["outcome"] == "pending" and wait["started"] >= nap["ended"] and (wait["ended"], wait["duration"]) == (None, None)
    assert shown["ended"] is None and shown["ended_iso"] is None
    client.get_handle("timed-1").signal("go", 1)
    assert client.get_handle("timed-1").result(timeout=10) == "TICK1"
    assert get_json(url)["timers"] == []
    client.start("chain", 2, id="chain-1").result(timeout=10)
    chained = get_json(wid_url(base, "chain-1", api=True))
    assert chained["input"] == [0] and [run["status"] for run in chained["previous_runs"]] == ["continued", "continued"]
    assert all(ISO.match(run["ended_iso"]) for run in chained["previous_runs"])


def _describe_elsewhere(endpoint: str, wid: str) -> dict[str, Any]:
    """``describe()`` from a fresh process that never imported the app (its types unknown)."""
    script = (
        "import json, sys; from weft_actors import Client\n"
        "with Client(sys.argv[1], timeout=10) as c: d = c.get_handle(sys.argv[2]).describe()\n"
        "print(json.dumps(d, default=repr))"
    )
    done = subprocess.run([sys.executable, "-c", script, endpoint, wid], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_an_input_of_a_type_the_reader_does_not_know_costs_only_the_input(served):
    """The supervisor imports the app, so its console shows an input of the app's own type;
    this process does not: there the input cannot be decoded, and is said so, beside the
    rest of the answer."""
    sup, base, client = served
    client.start("ship", id="ship-1")
    url = wid_url(base, "ship-1", api=True)
    shown = json_once(url, lambda found: found["previous_runs"] and found["status"] == "running")
    assert shown["input"] == ["Parcel(label='fragile', grams=750)"] and "input_error" not in shown  # JSON shows its repr
    direct = _describe_elsewhere(sup.endpoint, "ship-1")  # this process may have imported the app
    assert direct["input"] is None and "console_app.Parcel" in direct["input_error"] and "not registered" in direct["input_error"]
    assert "input_encoded" not in direct and direct["status"] == "running" and direct["owner_shard"]["pid"] in sup.shard_pids
    assert [run["status"] for run in direct["previous_runs"]] == ["continued"]
    client.get_handle("ship-1").signal("go", "sent")
    assert client.get_handle("ship-1").result(timeout=10) == "fragile: sent"


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
    status, headers, _ = post_form(f"{wid_url(base, handle.id)}/terminate", {"token": TOKEN, "reason": "from the console", "confirm": "yes"})
    assert status == 303 and headers["Location"] == "/workflows/act-1?done=terminate"
    described = get_json(url)
    assert described["status"] == "terminated" and described["error"]["message"] == "from the console"
    cancelled = client.start("waiter", "t", id="act-2")
    assert post_json(f"{wid_url(base, cancelled.id, api=True)}/cancel", {})[0] == 200
    wait_until(lambda: client.get_handle("act-2").describe()["status"] == "cancelled", timeout=10)
    # A refused action is answered on the POST itself (nothing of it travels in a URL): the
    # workflow's page again, the error shown and the form as typed.
    status, headers, body = post_form(f"{wid_url(base, 'act-1')}/signal", {"token": TOKEN, "name": "item", "payload": "{not json"})
    assert status == 400 and "Location" not in headers
    assert b"signal refused: invalid_request" in body and b'<h1>Workflow act-1</h1>' in body
    # A signal to a finished workflow: refused by the engine, shown on its page (no form there).
    status, headers, body = post_form(f"{wid_url(base, 'act-2')}/signal", {"token": TOKEN, "name": "item", "payload": "1"})
    assert status >= 400 and "Location" not in headers and b"signal refused: " in body and b'<h1>Workflow act-2</h1>' in body


def test_console_reads_through_curve_with_its_own_key(tmp_path):
    certs, full = tmp_path / "certs", tmp_path / "full"
    certs.mkdir(), full.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(certs), "server")
    sup, base = console_supervisor(tmp_path, shards=1, args=("--curve-secret-key", server_secret, "--curve-authorized-keys", str(full)))
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with sup:
        # Under CURVE a keyless ZeroMQ client reads nothing: nor does a tokenless HTTP one.
        assert request(f"{base}/api/overview")[0] == 401
        status, _, body = request(f"{base}/api/overview", headers=bearer)
        assert status == 200 and json.loads(body)["ready"] is True
        assert request(wid_url(base, "absent", api=True), headers=bearer)[0] == 404  # a describe went through the front door
        assert list(full.iterdir()) == []  # the console's key is never written


def test_a_non_loopback_console_needs_tls_or_insecure_http(tmp_path):
    command = [sys.executable, "-m", "weft_actors.supervisor", "--shards", "1", "--data", str(tmp_path / "d"),
               "--bind", f"tcp://127.0.0.1:{free_port()}", "--insecure-bind", "--http", f"0.0.0.0:{free_port()}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "refusing to serve the console on 0.0.0.0 over plain HTTP" in done.stderr
    bad = subprocess.run([*command[:-1], "nonsense:port"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--http wants HOST:PORT" in bad.stderr


def test_bench_console_list_prints_its_json_line():
    bench = Path(__file__).resolve().parents[2] / "bench" / "console_list.py"
    command = [sys.executable, str(bench), "--workflows", "2000", "--repeat", "1", "--rounds", "1", "--seconds", "0.5", "--clients", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout.strip())
    assert result["workflows"] == 2000 and result["page_html_ms_p50"] > 0
    assert result["api_all_scanned"] <= 51 and result["starts_per_s_alone"] > 0 and result["starts_per_s_hammered"] > 0


def test_the_schedules_page_lists_each_schedule_as_it_describes_itself(served):
    sup, base, client = served
    client.create_schedule("console-nightly", "echo", "night", spec={"cron": "0 3 * * *", "timezone": "Europe/Paris"}, paused=True, note="until launch")
    client.create_schedule("console-often", "echo", "often", spec=1.0, overlap="buffer_one")
    wait_until(lambda: client.get_schedule("console-often").describe()["fired"] >= 1, timeout=30, what="a fire")
    listed = {item["id"]: item for item in get_json(f"{base}/api/schedules")["items"]}
    nightly, often = listed["console-nightly"], listed["console-often"]
    assert nightly["paused"] and nightly["note"] == "until launch" and nightly["spec"]["cron"] == "0 3 * * *"
    assert often["overlap"] == "buffer_one" and often["fired"] >= 1 and ISO.match(often["next_iso"][0])
    status, _, body = request(f"{base}/schedules")
    assert status == 200
    page = body.decode()
    assert 'id="schedules"' in page and "cron 0 3 * * * (Europe/Paris)" in page and "until launch" in page
    assert "every 1" in page and "/workflows/console-often%2F" in page  # its last run, linked
    client.get_schedule("console-often").delete()
