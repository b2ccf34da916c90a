"""The command line's first hour (issue 30, D11-D14), against real supervisors: a CURVE
mismatch told apart from a server that is down, ``--bind`` read like ``--endpoint``,
``terminate``'s reason and ``result``'s wait, and the smaller rough edges (duration and
import errors, a closed pipe, ``--json`` errors, one-line usage errors, queued starts, a
finished id)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from _processes import RunningSupervisor, free_port, wait_until
from weft_actors.cli import main

pytestmark = pytest.mark.timeout(90)
TIMEOUT = 30.0


def run_module(*argv: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSupervisor]:
    with RunningSupervisor(tmp_path_factory.mktemp("first-hour") / "weft-data", shards=1) as running:
        yield running


def cli(supervisor: RunningSupervisor, *argv: str) -> int:
    return main(["--endpoint", supervisor.endpoint, "--timeout", "20", *argv])


def test_silence_from_a_curve_server_is_hinted_as_curve_and_logged_there(tmp_path: Path) -> None:
    import zmq.auth

    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    keys.mkdir()
    authorized.mkdir()
    _, server_secret = zmq.auth.create_certificates(str(keys), "server")
    server_public = str(keys / "server.key")
    client_public, _ = zmq.auth.create_certificates(str(keys), "client")
    _, stranger_secret = zmq.auth.create_certificates(str(keys), "stranger")
    os.replace(client_public, authorized / "client.key")
    args = ("--curve-secret-key", server_secret, "--curve-authorized-keys", str(authorized))
    with RunningSupervisor(tmp_path / "data", shards=1, args=args) as sup:
        plain = run_module("weft_actors", "--endpoint", sup.endpoint, "--timeout", "1", "ping")
        assert plain.returncode == 1 and "Traceback" not in plain.stderr, plain.stderr
        assert "--curve-server-key" in plain.stderr and "--curve-key" in plain.stderr, plain.stderr
        for _ in range(3):
            stranger = run_module(
                "weft_actors", "--endpoint", sup.endpoint, "--timeout", "1", "ping",
                "--curve-server-key", server_public, "--curve-key", stranger_secret,
            )
            assert stranger.returncode == 1 and "authorised" in stranger.stderr, stranger.stderr
        stranger_key = zmq.auth.load_certificate(str(keys / "stranger.key"))[0].decode()
        refused = wait_until(
            lambda: [line for line in sup.stderr_lines if "refused a CURVE handshake" in line], 10, "the refusal logged"
        )
        assert stranger_key in refused[0] and str(authorized) in refused[0]
        assert len(refused) == 1, refused  # rate-limited: three clients retrying, one line


def test_bind_without_a_transport_says_what_to_write(tmp_path: Path) -> None:
    port = free_port()
    done = run_module("weft_actors.supervisor", "--data", str(tmp_path / "data"), "--shards", "1", "--bind", f"127.0.0.1:{port}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"write tcp://127.0.0.1:{port}" in done.stderr and "refusing to bind" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_terminate_takes_its_reason_positionally(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "start", "sleeper", "[3600]", "--id", "fh-term-1") == 0
    assert cli(supervisor, "terminate", "fh-term-1", "not needed") == 0
    capsys.readouterr()
    assert cli(supervisor, "--json", "describe", "fh-term-1") == 0
    described = capsys.readouterr().out
    assert json.loads(described)["status"] == "terminated" and "not needed" in described
    assert cli(supervisor, "terminate", "fh-term-1", "why", "--reason", "twice") == 2
    err = capsys.readouterr().err
    assert "usage: python -m weft_actors terminate" in err and "--reason" in err


def test_result_waits_without_limit_by_default_and_refuses_a_negative_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["result", "anything", "--timeout", "-1"]) == 2
    assert "usage: python -m weft_actors result" in capsys.readouterr().err
    assert main(["result", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "without limit" in shown
    assert main(["--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "each reply from the supervisor" in shown and "result waits without limit" in shown


def test_a_bad_duration_says_what_a_duration_looks_like(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["purge", "--older-than", "7x", "--data", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "expected a duration such as 7d, 12h, 30m, 0s" in err and "parse_duration" not in err


def test_an_app_that_cannot_be_imported_is_no_usage_error(supervisor: RunningSupervisor, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "start", "hello", '"h"', "--id", "fh-replay-1") == 0
    assert cli(supervisor, "result", "fh-replay-1", "--timeout", "20") == 0
    capsys.readouterr()
    assert main(["export", "fh-replay-1", "--data", str(supervisor.data_dir)]) == 0
    history = tmp_path / "h.json"
    history.write_text(capsys.readouterr().out)
    assert main(["replay", "--history", str(history), "--app", "no_such_module_here"]) == 1
    err = capsys.readouterr().err
    assert "No module named" in err and "usage" not in err, err


def test_a_closed_pipe_ends_quietly(supervisor: RunningSupervisor) -> None:
    big = "x" * 300_000  # its describe is more than a pipe's buffer holds
    assert main(["--endpoint", supervisor.endpoint, "start", "hello", json.dumps([big]), "--id", "fh-pipe-1"]) == 0
    reader = subprocess.Popen(
        [sys.executable, "-m", "weft_actors", "--endpoint", supervisor.endpoint, "describe", "fh-pipe-1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert reader.stdout is not None
        reader.stdout.read(10)
        reader.stdout.close()  # as `| head -c 10` does
        err = reader.stderr.read().decode() if reader.stderr else ""
        reader.wait(TIMEOUT)
    finally:
        reader.kill()
        reader.wait(10)
    assert err == "", err  # no traceback, no "error: ... Broken pipe"


def test_with_json_an_error_is_a_json_document(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "--json", "describe", "fh-no-such") == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["code"] == "workflow_not_found" and err == ""
    assert cli(supervisor, "--json", "ping", "--nope") == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["code"] == "usage" and "--nope" in out and err == ""


def test_a_usage_error_of_the_supervisor_is_one_line(tmp_path: Path) -> None:
    done = run_module("weft_actors.supervisor", "--data", str(tmp_path / "data"), "--shards", "0")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "python -m weft_actors.supervisor: error: --shards must be at least 1 (--help lists the options)"
    ], done.stderr


def test_supervisor_help_shows_no_raw_markup() -> None:
    done = run_module("weft_actors.supervisor", "--help")
    assert done.returncode == 0 and "``" not in done.stdout and "Run the engine's shards" in done.stdout


def test_a_refused_start_of_a_finished_id_hints_start_new(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "start", "hello", '"a"', "--id", "fh-done-1") == 0
    assert cli(supervisor, "result", "fh-done-1", "--timeout", "20") == 0
    capsys.readouterr()
    assert cli(supervisor, "start", "hello", '"a"', "--id", "fh-done-1") == 1
    assert "hint: " in (err := capsys.readouterr().err) and "--if-exists start_new" in err


def test_a_start_that_waits_in_a_queue_says_pending_and_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with RunningSupervisor(tmp_path / "data", shards=1, app="flow_app") as sup:
        for n in range(4):
            argv = ("start", "order", f'["acme", {n}, 30]', "--id", f"fh-q-{n}")
            assert main(["--endpoint", sup.endpoint, *argv]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert not [line for line in lines[:2] if "pending" in line], lines
        assert lines[2].endswith("pending, position 1 in the queue of its type (concurrency 2)"), lines
        assert re.search(r"pending, position 2 ", lines[3]), lines
        assert main(["--endpoint", sup.endpoint, "--json", "start", "order", '["acme", 9, 30]', "--id", "fh-q-9"]) == 0
        assert json.loads(capsys.readouterr().out)["position"] == 3


def test_the_readme_leaves_no_cart_running_that_the_user_guide_reuses() -> None:
    root = Path(__file__).resolve().parents[1]
    readme, guide = (root / "README.md").read_text(), (root / "docs" / "user-guide.md").read_text()
    cart_ids = set(re.findall(r"start cart '\[\[\]\]' --id (\S+?)`", readme))
    assert cart_ids and not [wid for wid in cart_ids if f"--id {wid}" in guide], cart_ids
    schedule = readme.index("python -m weft_actors schedule create")
    assert "[cron]" in readme[schedule - 400:schedule], "the README's schedule example names the cron extra"
