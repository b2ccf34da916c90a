"""A pytest plugin: the ``weft_env`` fixture, a ``TimeSkippingEnvironment`` open for the test.

Installed with the package (the ``pytest11`` entry point), so a user's test is::

    import pytest
    from myapp import approval

    @pytest.mark.weft_app([approval])
    async def test_approval(weft_env):
        handle = await weft_env.engine.start(approval, "order-1")
        await weft_env.sleep(86_400)
        await handle.signal("approve", True)
        assert await weft_env.result(handle) == "approved"

The app is the ``weft_app`` marker's argument (a module or a list of ``@workflow``
functions; keyword arguments go to the ``Engine``) or a ``weft_app`` fixture the user
defines (in a ``conftest.py``, for every test). The environment must be opened on the loop
the test runs on, so this plugin runs an ``async def`` test that asks for ``weft_env`` itself
(``asyncio.run``, with the environment open around it): no asyncio plugin is needed, and
another one (pytest-asyncio, anyio) leaves such a test to this one. pytest is imported here
only: the package does not depend on it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, cast

import pytest

from .testing import TimeSkippingEnvironment

__all__ = ["weft_app", "weft_env"]

_NO_APP = (
    "weft_env needs the workflows to run: mark the test with @pytest.mark.weft_app([my_workflow, ...]) "
    "(or a module), or define a weft_app fixture that returns them"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "weft_app(app, **engine_options): the workflows (and Engine options) of the weft_env fixture")


@pytest.fixture
def weft_app(request: pytest.FixtureRequest) -> Any:
    """The app of ``weft_env``: the ``weft_app`` marker's first argument (override this
    fixture to give one app to many tests)."""
    marker = request.node.get_closest_marker("weft_app")
    if marker is None or not marker.args:
        pytest.fail(_NO_APP, pytrace=False)
    return marker.args[0]


@pytest.fixture
def weft_env(request: pytest.FixtureRequest, weft_app: Any) -> TimeSkippingEnvironment:
    """A ``TimeSkippingEnvironment`` over ``weft_app``: open inside an ``async def`` test
    (its engine and temporary store are closed and removed after it)."""
    marker = request.node.get_closest_marker("weft_app")
    options = dict(marker.kwargs) if marker is not None else {}
    return TimeSkippingEnvironment(weft_app, **options)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``async def`` test that uses ``weft_env`` on a loop of its own, the
    environment open around it; any other test is left to pytest and its plugins."""
    if "weft_env" not in pyfuncitem.fixturenames or not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    env = cast(TimeSkippingEnvironment, pyfuncitem.funcargs["weft_env"])

    async def run() -> None:
        async with env:
            await pyfuncitem.obj(**kwargs)

    asyncio.run(run())
    return True
