"""Input UTF-8 cannot encode, and JSON nested past what the parser reads, fail as the caller's
own ``InvalidRequest`` naming the field, on every client: ``Client``, ``AsyncClient``, the
embedded ``Engine`` and the command line (one line on stderr, no traceback). A lone surrogate
is what an undecodable byte of a command-line argument becomes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import pytest

import weft_actors.examples as examples
from _processes import RunningSupervisor
from weft_actors import AsyncClient, Client, Engine
from weft_actors.errors import InvalidRequest

BAD = "order-\udcff"
"""What ``order-\\xff`` in argv decodes to."""


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSupervisor]:
    with RunningSupervisor(tmp_path_factory.mktemp("unencodable") / "data", shards=1) as running:
        yield running


def _refused(call: Callable[[], Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        call()
    message = str(info.value)
    assert field in message and "lone surrogate" in message, message


async def _refused_async(call: Callable[[], Awaitable[Any]], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        await call()
    message = str(info.value)
    assert field in message and "lone surrogate" in message, message


@pytest.mark.timeout(60)
def test_the_sync_client_names_the_field(supervisor):
    with Client(supervisor.endpoint, timeout=10) as client:
        handle = client.start("three_steps", 1)
        _refused(lambda: client.start("three_steps", 1, id=BAD), "workflow id")
        _refused(lambda: client.get_handle(BAD).describe(), "workflow id")
        _refused(lambda: client.get_handle(BAD).signal("go", 1), "workflow id")
        _refused(lambda: handle.signal("go", 1, request_id=BAD), "request id")
        _refused(lambda: handle.signal(BAD, 1), "signal name")
        _refused(lambda: handle.query(BAD), "query name")
        _refused(lambda: client.start(BAD, 1), "workflow")
        assert handle.result(timeout=20) == 4  # nothing else was touched
        assert client.ping() == "pong"


@pytest.mark.timeout(60)
def test_the_async_client_names_the_field(supervisor):
    async def main() -> None:
        async with AsyncClient(supervisor.endpoint, timeout=10) as client:
            handle = await client.start("three_steps", 2)
            await _refused_async(lambda: client.start("three_steps", 1, id=BAD), "workflow id")
            await _refused_async(lambda: client.get_handle(BAD).describe(), "workflow id")
            await _refused_async(lambda: handle.update(BAD), "update name")
            await _refused_async(lambda: handle.signal("go", 1, request_id=BAD), "request id")
            assert await handle.result(timeout=20) == 5

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_the_engine_names_the_field(tmp_path: Path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=examples) as engine:
            handle = await engine.start(examples.three_steps, 3)
            await _refused_async(lambda: engine.start(examples.three_steps, 1, id=BAD), "workflow id")
            await _refused_async(lambda: engine.signal(BAD, "go", 1), "workflow id")
            await _refused_async(lambda: engine.describe(BAD), "workflow id")
            await _refused_async(lambda: engine.get_handle(BAD).cancel(), "workflow id")
            await _refused_async(lambda: handle.signal(BAD, 1), "signal name")
            await _refused_async(lambda: handle.signal("go", 1, request_id=BAD), "request id")
            assert await handle.result(timeout=20) == 6

    asyncio.run(main())


def _cli(supervisor: RunningSupervisor, cwd: Path, *argv: str | bytes) -> subprocess.CompletedProcess[bytes]:
    command: list[Any] = [sys.executable, "-m", "weft_actors", "--endpoint", supervisor.endpoint, *argv]
    return subprocess.run(command, capture_output=True, timeout=30, cwd=cwd)


def _one_line(done: subprocess.CompletedProcess[bytes], *words: str) -> str:
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 1, (done.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: invalid_request: ") and all(word in err for word in words), err
    return err


@pytest.mark.timeout(60)
def test_the_command_line_prints_one_line(supervisor, tmp_path: Path):
    _one_line(_cli(supervisor, tmp_path, "describe", b"order-\xff"), "workflow id", "lone surrogate")
    _one_line(_cli(supervisor, tmp_path, "start", "three_steps", "[1]", "--id", b"order-\xff"), "workflow id")
    _one_line(_cli(supervisor, tmp_path, "signal", "some-id", b"go-\xff"), "signal name")
    deep = 50_000
    _one_line(_cli(supervisor, tmp_path, "start", "three_steps", "[" * deep + "]" * deep), "nested too deeply", "JSON")
    _one_line(_cli(supervisor, tmp_path, "signal", "some-id", "go", '{"a":' * 20_000 + "1" + "}" * 20_000), "nested too deeply")
    done = _cli(supervisor, tmp_path, "ping")
    assert done.returncode == 0 and b"pong" in done.stdout
