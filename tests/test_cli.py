"""``python -m weft_actors`` and the supervisor's command line as a new user meets them: options
where they are typed, every command listed, usage errors that say what to type instead, and
no tracebacks (against a real supervisor where a server is involved)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from _processes import RunningSupervisor, free_port, wait_until
from weft_actors import AsyncClient, Client
from weft_actors.cli import main
from weft_actors.errors import InvalidRequest, WorkflowNotFound

TIMEOUT = 30.0


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSupervisor]:
    with RunningSupervisor(tmp_path_factory.mktemp("cli") / "weft-data", shards=2) as running:
        yield running


def cli(supervisor: RunningSupervisor, *argv: str) -> int:
    return main(["--endpoint", supervisor.endpoint, *argv])


def run_module(*argv: str, timeout: float = TIMEOUT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, env=env)


def test_timeout_after_the_command(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "ping", "--timeout", "5") == 0
    assert cli(supervisor, "ping", "--timeout", "0") == 2
    assert "argument --timeout" in capsys.readouterr().err


def test_signal_with_start_command(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("signal-with-start", "order", '["o-sws", 700]', "--id", "cli-sws-1", "--signal", "approve", "--payload", "true")
    assert cli(supervisor, *argv) == 0
    assert capsys.readouterr().out.startswith("cli-sws-1 (run ")
    assert cli(supervisor, "result", "cli-sws-1", "--timeout", "20", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"charge": "charge-o-sws-700", "approved": True}


def test_help_lists_operator_commands() -> None:
    done = run_module("-m", "weft_actors", "--help")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("    ") and line.split()}
    for name in ("backup", "purge", "replay", "export"):
        assert name in lines and len(lines[name].split()) > 3, f"{name} is not described in --help:\n{done.stdout}"


def test_supervisor_flags_have_help_and_default() -> None:
    done = run_module("-m", "weft_actors.supervisor", "--help")
    assert done.returncode == 0, done.stderr
    options = done.stdout[done.stdout.index("\noptions:"):]
    entries = re.split(r"\n(?=  -)", options)[1:]  # one per flag: its name, then its help
    assert len(entries) > 30
    for entry in entries:
        if not entry.lstrip().startswith("-h"):
            assert "default" in " ".join(entry.split()), f"no help with a default:\n{entry}"


def test_supervisor_unknown_log_level_is_a_usage_error(tmp_path: Path) -> None:
    argv = ("--data", str(tmp_path / "data"), "--bind", f"tcp://127.0.0.1:{free_port()}", "--shards", "1", "--log-level", "LOUD")
    done = run_module("-m", "weft_actors.supervisor", *argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--log-level" in done.stderr and "WARNING" in done.stderr


def _connected(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds an established TCP connection to 127.0.0.1:``port``."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[len("socket:["):-1] for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return False
    with open("/proc/net/tcp", encoding="ascii") as table:
        for row in list(table)[1:]:
            fields = row.split()
            if fields[2].endswith(f":{port:04X}") and fields[3] == "01" and fields[9] in inodes:
                return True
    return False


def test_ctrl_c_during_result_exits_130_quietly(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "start", "sleeper", "[3600]", "--id", "cli-nap-1") == 0
    # A default SIGINT disposition, as in a terminal (a test runner in the background ignores it).
    waiter = subprocess.Popen(
        [sys.executable, "-m", "weft_actors", "--endpoint", supervisor.endpoint, "result", "cli-nap-1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_until(lambda: _connected(waiter.pid, supervisor.port), TIMEOUT, "the result request sent")
        waiter.send_signal(signal.SIGINT)
        out, err = waiter.communicate(timeout=TIMEOUT)
    finally:
        waiter.kill()
        waiter.wait(10)
    assert waiter.returncode == 130 and err == "" and out == "", err
    assert cli(supervisor, "terminate", "cli-nap-1") == 0


def test_endpoint_without_transport_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--endpoint", "127.0.0.1:5555", "ping"]) == 2
    assert "tcp://127.0.0.1:5555" in capsys.readouterr().err
    assert main(["ping", "--endpoint", "localhost:5555"]) == 2
    assert "tcp://localhost:5555" in capsys.readouterr().err


def test_nothing_listening_fails_fast_with_a_hint() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = run_module("-m", "weft_actors", "--timeout", "5", "result", "anything", "--endpoint", endpoint, timeout=TIMEOUT)
    elapsed = time.monotonic() - started
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"nothing is listening at {endpoint}" in done.stderr and "python -m weft_actors.supervisor" in done.stderr
    assert elapsed < 5, f"took {elapsed:.1f}s"


def test_start_with_a_bare_word_explains_the_json_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["start", "hello", "world"]) == 2
    err = capsys.readouterr().err
    assert "not valid JSON" in err and """'["world"]'""" in err and """'"world"'""" in err


def test_start_with_the_wrong_number_of_arguments_is_refused_at_once(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(supervisor, "start", "hello", '["a", "b", "c"]', "--id", "cli-arity-1") == 1
    err = capsys.readouterr().err
    assert err == "error: invalid_request: hello(name) takes 1 argument, 3 given\n", err
    with Client(supervisor.endpoint, timeout=TIMEOUT) as client:
        with pytest.raises(InvalidRequest, match=r"^hello\(name\) takes 1 argument, 0 given$") as info:
            client.start("hello", id="cli-arity-2")
        assert (info.value.workflow_type, info.value.given) == ("hello", 0)
        with pytest.raises(InvalidRequest, match="takes 1 argument, 2 given"):
            client.execute("hello", "a", "b", id="cli-arity-3", timeout=TIMEOUT)

        async def from_async_client() -> None:
            async with AsyncClient(supervisor.endpoint, timeout=TIMEOUT) as aclient:
                with pytest.raises(InvalidRequest, match="takes 1 argument, 2 given"):
                    await aclient.signal_with_start("hello", "a", "b", id="cli-arity-4", signal="go")

        asyncio.run(from_async_client())
        for wid in ("cli-arity-1", "cli-arity-2", "cli-arity-3", "cli-arity-4"):
            with pytest.raises(WorkflowNotFound):
                client.get_handle(wid).describe()
        assert client.start("hello", "ada", id="cli-arity-5").result(timeout=TIMEOUT) == "Hello, ada!"


def test_describe_and_list_show_iso_times_and_json_keeps_the_raw_ones(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
    assert cli(supervisor, "start", "hello", '"iso"', "--id", "cli-iso-1") == 0
    assert cli(supervisor, "result", "cli-iso-1", "--timeout", "20") == 0
    capsys.readouterr()
    assert cli(supervisor, "--json", "describe", "cli-iso-1") == 0
    described = json.loads(capsys.readouterr().out)
    assert isinstance(described["created"], float) and iso.match(described["created_iso"])
    assert isinstance(described["ended"], float) and iso.match(described["ended_iso"])
    assert described["input"] == ["iso"] and described["owner_shard"] is None  # finished: no owner
    (op,) = described["history"]
    assert op["started"] <= op["ended"] and iso.match(op["started_iso"]) and op["duration"] >= 0
    # For a person: each time in ISO 8601, in its place; the raw twin is for --json only.
    assert cli(supervisor, "describe", "cli-iso-1") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["created"] == described["created_iso"] and shown["ended"] == described["ended_iso"]
    assert shown["history"][0]["started"] == op["started_iso"] and shown["history"][0]["duration"] == op["duration"]
    assert not [key for key in (*shown, *shown["history"][0]) if key.endswith("_iso")]
    assert cli(supervisor, "list", "--type", "hello") == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert iso.match(rows["cli-iso-1"][3])
