"""An engine's settings are one frozen record, ``EngineOptions``, validated when it is made:
``Engine(dir, app, heartbeat=...)`` builds it from keywords, ``options=`` passes one (keywords
beside it override its fields), and a bad value fails before anything is opened."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from _support import run
from weft_actors import Engine, EngineOptions, workflow
from weft_actors.shard._options import EngineSettings


@workflow
async def hello(ctx, name: str) -> str:
    return f"hello {name}"


def test_the_keywords_type_checkers_see_are_the_record_fields():
    assert set(typing.get_type_hints(EngineSettings)) == {field.name for field in dataclasses.fields(EngineOptions)}


def test_defaults_that_depend_on_other_fields_are_resolved_once():
    options = EngineOptions(heartbeat=0.25, ttl=1.5, max_live_actors=150_000)
    assert options.stall_threshold == 0.5  # ttl / 3, under 1 s
    assert options.max_active_workflows == 300_000  # 2 x max_live_actors, over 200,000
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.ttl = 10.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad",
    [
        {"heartbeat": 1.0, "ttl": 1.0},
        {"ownership": "mine"},
        {"retention": -1.0},
        {"max_live_actors": 0},
        {"max_live_actors": 10, "max_active_workflows": 10},
        {"max_running": 0},
        {"quarantine_after": True},
        {"stall_threshold": 0.0},
    ],
)
def test_a_bad_setting_is_refused_by_the_record_and_by_the_engine(tmp_path, bad):
    with pytest.raises(ValueError):
        EngineOptions(**bad)
    with pytest.raises(ValueError):
        Engine(str(tmp_path), app=[hello], **bad)
    assert list(tmp_path.iterdir()) == []  # nothing was opened


def test_an_engine_runs_on_a_record_and_keywords_override_its_fields(tmp_path):
    shared = EngineOptions(heartbeat=0.2, ttl=1.0, payload_limit=4096)

    async def main() -> None:
        async with Engine(str(tmp_path), app=[hello], options=shared, payload_limit=8192) as engine:
            assert engine.options.heartbeat == 0.2 and engine.options.payload_limit == 8192
            assert (engine.heartbeat, engine.ttl, engine.payload_limit) == (0.2, 1.0, 8192)
            assert await engine.execute(hello, "options") == "hello options"
        assert shared.payload_limit == 4096  # the caller's record is left as it was

    run(main())
