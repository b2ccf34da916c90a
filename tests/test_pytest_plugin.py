"""The ``weft_env`` pytest fixture (``weft_actors.pytest_plugin``), as a user meets it: a tiny
test file of theirs, run by pytest in a subprocess with the plugin loaded as the package's
``pytest11`` entry point would load it, with no asyncio plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_TESTS = '''
import pytest
from weft_actors import workflow


@workflow
async def nap_then_greet(ctx, name: str) -> str:
    await ctx.sleep(7 * 86400)  # a week: skipped, not waited
    return f"hello {name}"


@pytest.mark.weft_app([nap_then_greet])
async def test_a_week_in_an_instant(weft_env):
    before = weft_env.now()
    handle = await weft_env.engine.start(nap_then_greet, "ada", id="n-1")
    assert await weft_env.result(handle) == "hello ada"
    assert weft_env.now() - before >= 7 * 86400


@pytest.mark.weft_app([nap_then_greet])
async def test_the_sleep_helper(weft_env):
    handle = await weft_env.engine.start(nap_then_greet, "bo", id="n-2")
    await weft_env.sleep(7 * 86400)
    assert (await weft_env.engine.describe("n-2"))["status"] == "completed"


async def test_without_an_app_says_what_to_do(weft_env):
    pass
'''


@pytest.mark.timeout(60)
def test_an_async_user_test_gets_an_open_time_skipping_environment(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "weft_actors.pytest_plugin", "-p", "no:xdist", "-rA", "test_user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=50, env=env,
    )
    out = done.stdout + done.stderr
    assert "PASSED test_user.py::test_a_week_in_an_instant" in out, out
    assert "PASSED test_user.py::test_the_sleep_helper" in out, out
    assert "test_without_an_app_says_what_to_do" in out and "@pytest.mark.weft_app" in out, out
    assert "2 passed" in out and ("1 error" in out or "1 failed" in out), out


def test_the_plugin_is_an_entry_point_and_pytest_no_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"weft_actors.pytest_plugin": "weft_actors.pytest_plugin"}
    assert not [dep for dep in project["dependencies"] if dep.startswith("pytest")]
    done = subprocess.run(
        [sys.executable, "-c", "import sys, weft_actors, weft_actors.testing; assert 'pytest' not in sys.modules"],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
