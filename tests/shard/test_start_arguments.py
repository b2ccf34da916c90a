"""A start whose arguments do not fit the workflow's signature is refused at the start, with
``invalid_request`` naming the workflow and its parameters, and nothing is written: not a
run that fails later with ``TypeError``. The same for a child start and a continue-as-new."""

from __future__ import annotations

from typing import Any

import pytest

from _support import run
from weft_actors import Engine, workflow
from weft_actors.errors import InvalidRequest, WorkflowNotFound

pytestmark = pytest.mark.timeout(20)


@workflow
async def hello(ctx, name: str) -> str:
    return f"hello {name}"


@workflow
async def greeting(ctx, name: str, greeting: str = "hi", *more: str, shout: bool = False) -> str:
    text = " ".join([greeting, name, *more])
    return text.upper() if shout else text


@workflow
async def needs_keyword(ctx, name: str, *, loud: bool) -> str:
    return name


@workflow
async def no_ctx() -> None:
    return None


@workflow
async def parent_by_name(ctx, *args: Any) -> Any:
    try:
        await ctx.child("hello", *args, id="kid-by-name")
    except InvalidRequest as exc:
        return ["refused", exc.code, str(exc)]
    return "started"


@workflow
async def parent_by_function(ctx) -> Any:
    try:
        await ctx.child(hello, "a", "b", id="kid-by-function")
    except InvalidRequest as exc:
        return ["refused", exc.code, str(exc)]
    return "started"


@workflow
async def continues_badly(ctx, first: int) -> Any:
    try:
        return ctx.continue_as_new(first, "extra")
    except InvalidRequest as exc:
        return ["refused", str(exc)]


APP = [hello, greeting, needs_keyword, no_ctx, parent_by_name, parent_by_function, continues_badly]


def test_a_start_with_too_many_arguments_is_refused_before_anything_is_written(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            for call in (engine.start, engine.execute):
                with pytest.raises(InvalidRequest) as info:
                    await call(hello, "a", "b", "c", id="too-many")
                assert info.value.code == "invalid_request"
                assert str(info.value) == "hello(name) takes 1 argument, 3 given"
                assert (info.value.workflow_type, info.value.parameters, info.value.given) == ("hello", "name", 3)
            with pytest.raises(InvalidRequest, match=r"^hello\(name\) takes 1 argument, 0 given$"):
                await engine.start("hello", id="too-few")
            with pytest.raises(InvalidRequest, match="takes 1 argument, 2 given"):
                await engine.signal_with_start(hello, "a", "b", id="sws", signal="go")
            with pytest.raises(InvalidRequest, match="takes 1 argument, 2 given"):
                await engine.start(hello, "a", "b", id="later", start_delay=5)
            for wid in ("too-many", "too-few", "sws", "later"):
                with pytest.raises(WorkflowNotFound):
                    await engine.describe(wid)
            assert engine.store.count("workflows") == 0
            assert await engine.execute(hello, "ada") == "hello ada"

    run(main())


def test_defaults_star_args_and_keyword_only_parameters_are_respected(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            assert await engine.execute(greeting, "ada") == "hi ada"
            assert await engine.execute(greeting, "ada", "hello", "and", "alan") == "hello ada and alan"
            with pytest.raises(InvalidRequest) as info:
                await engine.start(greeting)
            assert str(info.value) == "greeting(name, greeting='hi', *more, shout=False) takes at least 1 argument, 0 given"
            with pytest.raises(InvalidRequest, match=r"needs_keyword\(name, \*, loud\) cannot be started: keyword-only parameter 'loud' has no default"):
                await engine.start(needs_keyword, "ada")
            with pytest.raises(InvalidRequest, match=r"no_ctx\(\) cannot be started: it takes no ctx parameter"):
                await engine.start(no_ctx)
            assert engine.store.count("workflows") == 2  # the two greetings

    run(main())


def test_a_child_start_with_the_wrong_arguments_fails_that_op_in_the_parent(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            refused = await engine.execute(parent_by_name, "a", "b", id="p1", timeout=5)
            assert refused == ["refused", "invalid_request", "hello(name) takes 1 argument, 2 given"]
            refused = await engine.execute(parent_by_function, id="p2", timeout=5)
            assert refused == ["refused", "invalid_request", "hello(name) takes 1 argument, 2 given"]
            for kid in ("kid-by-name", "kid-by-function"):
                with pytest.raises(WorkflowNotFound):
                    await engine.describe(kid)
            assert await engine.execute(parent_by_name, "ada", id="p3", timeout=5) == "started"
            assert (await engine.describe("kid-by-name"))["status"] == "completed"

    run(main())


def test_continue_as_new_with_the_wrong_arguments_raises_in_the_run_that_asks(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            refused = await engine.execute(continues_badly, 1, timeout=5)
            assert refused == ["refused", "continues_badly(first) takes 1 argument, 2 given"]

    run(main())
