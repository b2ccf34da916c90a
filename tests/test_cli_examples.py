"""The bundled example app lets a new user try every documented client command against the
default supervisor: updates (``cart``) and child workflows (``greet_all``) included, here
driven through the command line as the docs show."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from _processes import RunningSupervisor
from weft_actors.cli import main


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSupervisor]:
    with RunningSupervisor(tmp_path_factory.mktemp("cli-examples") / "weft-data", shards=2) as running:
        yield running


def cli_json(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """The command's ``--json`` output; it must succeed."""
    status = main(["--endpoint", supervisor.endpoint, "--json", *argv])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out)


def test_cart_takes_updates_through_the_cli(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    cli_json(supervisor, capsys, "start", "cart", "[[]]", "--id", "cart-cli-1")
    assert cli_json(supervisor, capsys, "update", "cart-cli-1", "add", '"tea"', "--request-id", "r-1") == 1
    assert cli_json(supervisor, capsys, "update", "cart-cli-1", "add", '"tea"', "--request-id", "r-1") == 1  # same request
    assert main(["--endpoint", supervisor.endpoint, "update", "cart-cli-1", "add", "3"]) == 1
    assert "update_rejected" in capsys.readouterr().err  # the validator: items are names
    assert cli_json(supervisor, capsys, "update", "cart-cli-1", "add", '"jam"') == 2
    assert cli_json(supervisor, capsys, "update", "cart-cli-1", "add", '"milk"') == 3
    assert cli_json(supervisor, capsys, "result", "cart-cli-1", "--timeout", "20") == ["tea", "jam", "milk"]


def test_greet_all_runs_child_workflows_through_the_cli(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    cli_json(supervisor, capsys, "start", "greet_all", '[["ada", "alan"]]', "--id", "greet-cli-1")
    assert cli_json(supervisor, capsys, "result", "greet-cli-1", "--timeout", "20") == ["Hello, ada!", "Hello, alan!"]
    parent = cli_json(supervisor, capsys, "describe", "greet-cli-1")
    children = [op["child_id"] for op in parent["history"] if op["kind"] == "child"]
    assert len(children) == 2
    for child_id in children:
        child = cli_json(supervisor, capsys, "describe", child_id)
        assert (child["type"], child["status"], child["parent"]) == ("hello", "completed", "greet-cli-1")
