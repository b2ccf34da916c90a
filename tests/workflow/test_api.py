"""Authoring API: RetryPolicy, @workflow, @activity, collect_workflows, activity.info()."""

from __future__ import annotations

import types

import pytest
from wf_harness import FakeEngine

from weft_actors.errors import InvalidRequest
from weft_actors.workflow import (
    ActivityInfo,
    RetryPolicy,
    activity,
    activity_definition,
    collect_workflows,
    current_activity,
    workflow,
    workflow_definition,
)

# -- RetryPolicy ------------------------------------------------------------------------------


def test_retry_delay_grows_by_backoff_from_the_initial_interval_and_is_capped() -> None:
    policy = RetryPolicy(max_attempts=10, initial_interval=0.5, backoff=3.0, max_interval=10.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.5, 4.5, 10.0, 10.0]


def test_retry_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.initial_interval, policy.backoff, policy.max_interval) == (3, 1.0, 2.0, 100.0)
    assert [policy.delay(n) for n in (1, 2, 3, 7, 8)] == [1.0, 2.0, 4.0, 64.0, 100.0]


def test_retry_with_backoff_one_waits_the_same_each_time() -> None:
    assert [RetryPolicy(initial_interval=2.0, backoff=1.0).delay(n) for n in (1, 5, 50)] == [2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"initial_interval": -1.0},
        {"max_interval": -0.1},
        {"backoff": 0.5},
    ],
)
def test_retry_policy_rejects_impossible_values(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_non_retryable_types_are_kept_as_a_tuple_and_matched_by_isinstance() -> None:
    policy = RetryPolicy(non_retryable=[KeyError, PermissionError])  # type: ignore[arg-type]
    assert policy.non_retryable == (KeyError, PermissionError)
    assert not policy.retryable(KeyError("k"))
    assert not policy.retryable(PermissionError())  # an OSError subclass listed itself
    assert policy.retryable(OSError())
    assert policy.retryable(ValueError())


def test_retry_policy_is_frozen() -> None:
    with pytest.raises(AttributeError):
        RetryPolicy().max_attempts = 5  # type: ignore[misc]


def test_non_retryable_error_is_not_retried_by_the_engine() -> None:
    @activity(retry=RetryPolicy(max_attempts=5, non_retryable=(KeyError,)))
    def picky() -> None:
        raise KeyError("nope")

    @workflow
    async def wf(ctx) -> None:
        await ctx.run(picky)

    engine = FakeEngine(wf)
    assert engine.run_to_end().kind == "fail"
    assert len(engine.activity_calls) == 1


# -- @workflow --------------------------------------------------------------------------------


def test_workflow_on_a_plain_function_raises_type_error() -> None:
    def not_async(ctx) -> None: ...

    with pytest.raises(TypeError, match="async def"):
        workflow(not_async)
    with pytest.raises(TypeError):
        workflow(name="x")(not_async)


def test_workflow_is_named_after_the_function_unless_a_name_is_given() -> None:
    @workflow
    async def shipping(ctx) -> None: ...

    @workflow(name="x")
    async def renamed(ctx) -> None: ...

    assert workflow_definition(shipping).name == "shipping"
    assert workflow_definition(shipping).fn is shipping
    assert workflow_definition(renamed).name == "x"
    assert workflow_definition(lambda: None) is None


def test_workflow_decorator_returns_the_function_itself() -> None:
    async def body(ctx) -> int:
        return 1

    assert workflow(body) is body
    assert workflow(name="y")(body) is body


# -- @activity --------------------------------------------------------------------------------


def test_activity_definition_records_name_kind_and_options() -> None:
    policy = RetryPolicy(max_attempts=7)

    @activity(name="pay", retry=policy, start_to_close=30, schedule_to_close=90)
    async def charge() -> None: ...

    @activity
    def plain() -> None: ...

    d = activity_definition(charge)
    assert (d.name, d.fn, d.is_async, d.retry, d.start_to_close, d.schedule_to_close) == ("pay", charge, True, policy, 30, 90)
    p = activity_definition(plain)
    assert (p.name, p.is_async, p.retry, p.start_to_close, p.schedule_to_close) == ("plain", False, RetryPolicy(), None, None)


def test_activity_on_a_non_callable_raises_type_error() -> None:
    with pytest.raises(TypeError):
        activity(42)


def test_ctx_run_options_override_the_activity_definition() -> None:
    @activity(retry=RetryPolicy(max_attempts=2), start_to_close=5)
    def act() -> None: ...

    @workflow
    async def wf(ctx) -> None:
        await ctx.run(act, retry=RetryPolicy(max_attempts=9), start_to_close=1, schedule_to_close=2)
        await ctx.run(act)

    engine = FakeEngine(wf)
    engine.run_to_end()
    first, second = (c.op for c in engine.commands if c.kind == "op")
    assert (first.retry.max_attempts, first.start_to_close, first.schedule_to_close) == (9, 1, 2)
    assert (second.retry.max_attempts, second.start_to_close, second.schedule_to_close) == (2, 5, None)


# -- activity.info() --------------------------------------------------------------------------


def test_activity_info_outside_an_activity_raises_lookup_error() -> None:
    with pytest.raises(LookupError, match="outside"):
        activity.info()


def test_activity_info_inside_an_activity_has_a_stable_idempotency_key() -> None:
    seen: list[ActivityInfo] = []

    @activity(retry=RetryPolicy(max_attempts=2, initial_interval=0))
    def flaky() -> str:
        info = activity.info()
        seen.append(info)
        if info.attempt == 1:
            raise ConnectionError("transient")
        return info.key

    @workflow
    async def wf(ctx) -> str:
        await ctx.sleep(1)
        return await ctx.run(flaky)

    engine = FakeEngine(wf, workflow_id="order-1", run_id="run-a")
    engine.run_to_end()
    assert engine.result() == "order-1/run-a/1"
    assert [(i.key, i.workflow_id, i.run_id, i.seq, i.attempt, i.activity) for i in seen] == [
        ("order-1/run-a/1", "order-1", "run-a", 1, 1, "flaky"),
        ("order-1/run-a/1", "order-1", "run-a", 1, 2, "flaky"),
    ]
    with pytest.raises(LookupError):
        activity.info()


def test_activity_info_reads_the_current_activity_contextvar() -> None:
    info = ActivityInfo("w/r/3", "w", "r", 3, 1, "act")
    token = current_activity.set(info)
    try:
        assert activity.info() is info
    finally:
        current_activity.reset(token)


# -- collect_workflows ------------------------------------------------------------------------


@workflow
async def alpha(ctx) -> None: ...


@workflow(name="beta-v2")
async def beta(ctx) -> None: ...


def test_collect_workflows_from_a_module_takes_only_workflows() -> None:
    module = types.ModuleType("app")
    module.alpha = alpha
    module.beta = beta
    module.helper = lambda: None
    module.CONSTANT = 3
    found = collect_workflows(module)
    assert sorted(found) == ["alpha", "beta-v2"]
    assert found["alpha"].fn is alpha and found["beta-v2"].fn is beta


def test_collect_workflows_from_a_list_or_a_single_workflow() -> None:
    assert sorted(collect_workflows([alpha, beta])) == ["alpha", "beta-v2"]
    assert sorted(collect_workflows((alpha,))) == ["alpha"]
    assert sorted(collect_workflows(beta)) == ["beta-v2"]
    assert collect_workflows(None) == {}
    assert collect_workflows([alpha, alpha]) == {"alpha": workflow_definition(alpha)}


def test_collect_workflows_rejects_non_workflows_in_a_list_and_duplicate_names() -> None:
    with pytest.raises(InvalidRequest, match="not a @workflow"):
        collect_workflows([alpha, print])

    @workflow(name="alpha")
    async def impostor(ctx) -> None: ...

    with pytest.raises(InvalidRequest, match="two workflows are named 'alpha'"):
        collect_workflows([alpha, impostor])
    module = types.ModuleType("app")
    module.alpha = alpha
    module.impostor = impostor
    with pytest.raises(InvalidRequest):
        collect_workflows(module)
