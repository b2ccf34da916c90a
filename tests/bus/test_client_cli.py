"""``python -m weft_actors`` (``weft_actors.cli.main``) against a fake server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_client_fakes import NO_REPLY, FakeServer, canned, not_found  # noqa: E402

from weft_actors.cli import main  # noqa: E402
from weft_actors.codec import decode, decode_args, encode  # noqa: E402


@pytest.fixture
def server() -> Any:
    with FakeServer() as fake:
        yield fake


def cli(server: FakeServer, *argv: str) -> int:
    return main(["--endpoint", server.endpoint, "--timeout", "5", *argv])


def test_start_with_args_and_options(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(server, "start", "order", '["o-1", 1299]', "--id", "order-o-1", "--memo", '{"a": 1}', "--start-delay", "1.5") == 0
    assert capsys.readouterr().out.strip() == "order-o-1 (run run-1)"
    request = [request for request in server.requests if request["op"] == "start"][-1]  # then a describe (queued?)
    assert decode_args(request["args"]) == ("o-1", 1299) and decode(request["memo"]) == {"a": 1}
    assert (request["wid"], request["start_delay"], request["if_exists"]) == ("order-o-1", 1.5, "error")
    assert cli(server, "start", "order", '"single"', "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"id": "generated-1", "run_id": "run-1"}
    assert decode_args([request for request in server.requests if request["op"] == "start"][-1]["args"]) == ("single",)


def test_signal_query_update_result(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(server, "signal", "w", "approve", "true") == 0
    assert capsys.readouterr().out.strip() == "ok" and decode(server.requests[-1]["payload"]) is True
    assert cli(server, "signal", "w", "poke", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True} and decode(server.requests[-1]["payload"]) is None
    assert cli(server, "query", "w", "status", "[1, 2]", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"name": "status", "args": [1, 2]}
    assert cli(server, "update", "w", "add", "7", "--request-id", "r-1", "--json") == 0
    assert json.loads(capsys.readouterr().out)["request_id"] == "r-1"
    assert cli(server, "result", "w", "--timeout", "3") == 0
    assert json.loads(capsys.readouterr().out) == ["done", "w"]


def test_describe_list_stats_and_non_json_values(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(server, "--json", "describe", "w") == 0
    described = json.loads(capsys.readouterr().out)
    assert described["created"] == "2026-01-02T03:04:05+00:00" and described["tags"] == ["a"]
    assert cli(server, "list", "--status", "failed", "--limit", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "TYPE", "STATUS", "UPDATED"]
    assert lines[1].split() == ["wf-0", "order", "failed", "1.5"] and lines[-1] == "next: --cursor next-page"
    assert cli(server, "list", "--json") == 0
    assert len(json.loads(capsys.readouterr().out)["items"]) == 3
    assert cli(server, "stats") == 0
    assert json.loads(capsys.readouterr().out)["supervisor"] == {"shards": 2}
    assert cli(server, "cancel", "w") == 0 and cli(server, "terminate", "w", "--reason", "r") == 0
    assert server.requests[-1]["reason"] == "r"


def test_bytes_and_sets_printable(capsys: pytest.CaptureFixture[str]) -> None:
    def handler(request: dict[str, Any]) -> Any:
        if request["op"] == "query":
            return encode({"raw": b"\x00\x01", "set": {3, 1}, 5: (1, 2)})
        return canned(request)

    with FakeServer(handler) as fake:
        assert cli(fake, "--json", "query", "w", "q") == 0
    assert json.loads(capsys.readouterr().out) == {"raw": "AAE=", "set": [1, 3], "5": [1, 2]}


def test_weft_error_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeServer(not_found) as fake:
        assert cli(fake, "result", "missing") == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip() == "error: workflow_not_found: workflow 'missing' not found"


def test_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeServer(lambda request: NO_REPLY) as fake:
        assert main(["--endpoint", fake.endpoint, "--timeout", "0.2", "stats"]) == 1
    assert capsys.readouterr().err.startswith("error: server_unavailable: ")


def test_usage_errors_exit_2(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(server, "start", "order", "{not json") == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert cli(server, "frobnicate") == 2
    assert cli(server, "--curve-server-key", "/no/such/file", "stats") == 2
    assert capsys.readouterr().err.count("error: usage:") == 1
    assert server.requests == []


def test_keygen_writes_a_key_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", str(tmp_path / "keys"), "--name", "alice", "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)
    assert Path(paths["public"]) == tmp_path / "keys" / "alice.key"
    assert Path(paths["secret"]).is_file() and Path(paths["public"]).is_file()
    assert main(["keygen", str(tmp_path / "keys")]) == 0
    assert "client.key_secret" in capsys.readouterr().out


def test_python_dash_m_help() -> None:
    done = subprocess.run([sys.executable, "-m", "weft_actors", "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "keygen" in done.stdout
