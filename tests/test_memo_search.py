"""Searching the workflow list by memo fields: the embedded engine, the clients over a real
supervisor, and ``python -m weft_actors list --memo KEY=VALUE``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Iterator

import pytest

from _processes import RunningSupervisor
from _support import run
from weft_actors import AsyncClient, Client, Engine, examples
from weft_actors.cli import main
from weft_actors.errors import InvalidRequest

TIMEOUT = 30.0

MEMOS = {
    "m-acme-eu": {"customer": "acme", "region": "eu", "tier": 2},
    "m-acme-us": {"customer": "acme", "region": "us", "tier": 1},
    "m-bolt-eu": {"customer": "bolt", "region": "eu", "vip": True},
    "m-none": None,
}


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSupervisor]:
    with RunningSupervisor(tmp_path_factory.mktemp("memo") / "weft-data", shards=2) as running:
        with Client(running.endpoint, timeout=TIMEOUT) as client:
            handles = [client.start("hello", wid, id=wid, memo=memo) for wid, memo in MEMOS.items()]
            for handle in handles:
                assert handle.result(timeout=TIMEOUT).startswith("Hello")
        yield running


def _ids(page: dict) -> list[str]:
    return [item["id"] for item in page["items"]]


def test_the_embedded_engine_lists_by_memo(tmp_path: Path) -> None:
    async def main_() -> None:
        async with Engine(store=str(tmp_path / "db"), app=examples) as engine:
            for wid, memo in MEMOS.items():
                await engine.start("hello", wid, id=wid, memo=memo)
            assert _ids(await engine.list(memo={"customer": "acme"})) == ["m-acme-eu", "m-acme-us"]
            assert _ids(await engine.list(memo={"region": "eu", "customer": "bolt"})) == ["m-bolt-eu"]
            assert _ids(await engine.list(memo={"tier": 2}, type="hello")) == ["m-acme-eu"]
            assert _ids(await engine.list(memo={"customer": "acme"}, type="order")) == []
            with pytest.raises(InvalidRequest, match="not searchable"):
                await engine.list(memo={"region": ["eu"]})

    run(main_())


def test_the_clients_list_by_memo_with_status_and_pages(supervisor: RunningSupervisor) -> None:
    with Client(supervisor.endpoint, timeout=TIMEOUT) as client:
        assert _ids(client.list(memo={"customer": "acme"})) == ["m-acme-eu", "m-acme-us"]
        assert _ids(client.list(memo={"vip": True}, status="completed")) == ["m-bolt-eu"]
        assert _ids(client.list(memo={"customer": "acme"}, status="running")) == []
        first = client.list(memo={"region": "eu"}, limit=1)
        assert _ids(first) == ["m-acme-eu"] and first["cursor"]
        rest = client.list(memo={"region": "eu"}, limit=1, cursor=first["cursor"])
        assert _ids(rest) == ["m-bolt-eu"]
        with pytest.raises(InvalidRequest, match="not searchable"):  # the server's check, over the wire
            client.list(memo={"customer": "x" * 300})
        with pytest.raises(InvalidRequest, match="memo filter"):  # what the wire cannot carry
            client.list(memo={"region": {"nested": 1}})  # type: ignore[dict-item]

    async def async_list() -> list[str]:
        async with AsyncClient(supervisor.endpoint, timeout=TIMEOUT) as client:
            return _ids(await client.list(memo={"customer": "acme", "region": "us"}))

    assert asyncio.run(async_list()) == ["m-acme-us"]


def test_the_cli_lists_by_memo_and_repeats_are_anded(supervisor: RunningSupervisor, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--endpoint", supervisor.endpoint]
    assert main([*base, "list", "--memo", "customer=acme"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == ["m-acme-eu", "m-acme-us"]
    assert main([*base, "--json", "list", "--memo", "customer=acme", "--memo", "region=eu"]) == 0
    assert _ids(json.loads(capsys.readouterr().out)) == ["m-acme-eu"]
    assert main([*base, "--json", "list", "--memo", "tier=1"]) == 0
    assert _ids(json.loads(capsys.readouterr().out)) == ["m-acme-us"]
    assert main([*base, "--json", "list", "--memo", "tier=\"1\""]) == 0  # the string "1", which no memo holds
    assert _ids(json.loads(capsys.readouterr().out)) == []
    assert main([*base, "list", "--memo", "customer"]) == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err
    assert main([*base, "list", "--memo", "region={\"a\": 1}"]) == 2
    assert "nested values" in capsys.readouterr().err
    assert main([*base, "list", "--memo", "customer=acme", "--memo", "customer=bolt"]) != 0
    assert "given twice" in capsys.readouterr().err
