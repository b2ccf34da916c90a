"""Every example in ``docs/*.md`` runs, and prints what the docs say it prints.

- Each fenced ``python`` block is a complete program: it is written to a file and run with
  this interpreter in a fresh temporary directory; it must exit 0 within ``TIMEOUT`` seconds.
  A ``text`` block that follows it directly (nothing but blank lines in between) is its exact
  expected standard output.
- A ``sh`` block whose first line is ``# doctest: run`` is run with ``bash -e`` against a real
  supervisor started here (2 shards, the bundled app ``weft_actors.examples``): ``WEFT_ENDPOINT``
  points the CLI at it and the working directory holds its data directory as ``./weft-data``,
  the default the commands use. ``python`` on ``PATH`` is this interpreter. Other ``sh`` blocks
  (long-running servers, destructive procedures) are shown, not run.
- Python programs that talk to a server read ``WEFT_ENDPOINT`` too, so they get the same
  supervisor; it is started once, and only if a block needs it.

Test ids are ``<file>:<block number>:L<line>`` (blocks numbered from 1 per file, counting
every fenced block), so a failure points at the block.

The README is run as a whole (``test_readme_runs_in_order_twice``): its blocks in order, twice,
as a new user would paste them, against a supervisor started as its first block says (on a
free port instead of 5555). Its set-up blocks (``pip install``) are what the test environment
already is; a ``python`` block whose first line is ``# NAME.py ...`` is saved as that module
(the tour's ``orders.py``) for the blocks after it; ``.venv/bin/python`` runs this interpreter.
Every block of the docs that needs a server runs twice in a row too
(``test_server_examples_run_twice``): an example with a fixed workflow id must survive that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from _processes import RunningSupervisor
from weft_actors.bus import DEFAULT_ENDPOINT

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SETUP_MARK = "pip install"  # a README block that sets up the environment the test runs in
_MODULE_BLOCK = re.compile(r"^# (?P<name>[A-Za-z_]\w*)\.py\b")
TIMEOUT = 30.0
RUN_MARK = "# doctest: run"
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


class Block(NamedTuple):
    file: str
    number: int
    line: int
    lang: str
    code: str
    output: str | None  # for python blocks: the text block right after it, if any

    @property
    def id(self) -> str:
        return f"{self.file}:{self.number}:L{self.line}"


def parse_blocks(path: Path) -> list[Block]:
    """Fenced blocks of a Markdown file, in order (an unclosed fence is an error)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    raw: list[tuple[int, str, str, int, int]] = []  # (line, lang, code, start index, end index)
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match.group("fence")
        lang = (match.group("info").strip().split() or [""])[0].lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence)) and set(lines[i].strip()) == {fence[0]}):
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            raise AssertionError(f"{path.name}:{start + 1}: unclosed code fence")
        raw.append((start + 1, lang, "\n".join(body) + "\n", start, i))
        i += 1
    blocks = []
    for number, (line, lang, code, _, end) in enumerate(raw, 1):
        output = None
        if lang == "python" and number < len(raw):
            next_line, next_lang, next_code, next_start, _ = raw[number]
            if next_lang == "text" and all(not text.strip() for text in lines[end + 1 : next_start]):
                output = next_code
        blocks.append(Block(path.name, number, line, lang, code, output))
    return blocks


def doc_files() -> list[Path]:
    # docs/ only: the README runs as one sequence (see the module docstring).
    return sorted(DOCS.glob("*.md"))


ALL_BLOCKS = [block for path in doc_files() for block in parse_blocks(path)]
PYTHON = [block for block in ALL_BLOCKS if block.lang == "python"]
SHELL = [block for block in ALL_BLOCKS if block.lang in ("sh", "bash", "shell", "console") and block.code.startswith(RUN_MARK)]


def needs_server(block: Block) -> bool:
    return "WEFT_ENDPOINT" in block.code


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One supervisor for every block that needs a server; its cwd-relative data dir is
    ``<workdir>/weft-data``."""
    workdir = tmp_path_factory.mktemp("docs-supervisor")
    with RunningSupervisor(workdir / "weft-data", shards=2) as running:
        running.workdir = workdir  # type: ignore[attr-defined]
        yield running


def _env(endpoint: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("WEFT_ENDPOINT", None)
    if endpoint is not None:
        env["WEFT_ENDPOINT"] = endpoint
    return env


def _report(block: Block, result: subprocess.CompletedProcess[str]) -> str:
    return f"{block.id} ({block.lang}) exited {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def run_python(block: Block, cwd: Path, endpoint: str | None) -> subprocess.CompletedProcess[str]:
    """Run a python block as a program in ``cwd``; fail the test if it does not finish."""
    match = _MODULE_BLOCK.match(block.code)
    script = cwd / (f"{match.group('name')}.py" if match else f"example_{block.number}.py")
    script.write_text(block.code, encoding="utf-8")
    try:
        return subprocess.run([sys.executable, str(script)], cwd=cwd, env=_env(endpoint), capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.id}: did not finish within {TIMEOUT}s\n{exc.stdout}\n{exc.stderr}")


def run_shell(block: Block, cwd: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    """Run a shell block with ``bash -e`` in ``cwd``, the CLI pointed at ``endpoint``."""
    try:
        return subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.code],
            cwd=cwd, env=_env(endpoint), capture_output=True, text=True, timeout=TIMEOUT * 2,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.id}: did not finish within {TIMEOUT * 2}s\n{exc.stdout}\n{exc.stderr}")


def check_python(block: Block, result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, _report(block, result)
    if block.output is not None:
        assert _normalise(result.stdout) == _normalise(block.output), f"{block.id}: output differs from the docs\n" + _report(block, result)


def test_docs_exist_and_have_examples() -> None:
    names = {path.name for path in doc_files()}
    assert {"README.md", "user-guide.md", "guarantees.md", "operations.md", "architecture.md"} <= names
    assert len(PYTHON) >= 15 and len(SHELL) >= 3


@pytest.mark.parametrize("block", PYTHON, ids=[block.id for block in PYTHON])
def test_python_example(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    endpoint = request.getfixturevalue("supervisor").endpoint if needs_server(block) else None
    check_python(block, run_python(block, tmp_path, endpoint))


@pytest.mark.parametrize("block", SHELL, ids=[block.id for block in SHELL])
def test_shell_example(block: Block, supervisor: Any) -> None:
    result = run_shell(block, supervisor.workdir, supervisor.endpoint)
    assert result.returncode == 0, _report(block, result) + "\n--- supervisor log ---\n" + supervisor.log_text()[-4000:]


@pytest.mark.timeout(240)
def test_server_examples_run_twice(tmp_path: Path) -> None:
    """Each docs example that talks to a server, in order, then all of them again: a second
    run finds the first one's workflows in the store."""
    blocks = [block for block in ALL_BLOCKS if (block in PYTHON and needs_server(block)) or block in SHELL]
    assert len(blocks) >= 5
    with RunningSupervisor(tmp_path / "weft-data", shards=2) as running:
        for attempt in (1, 2):
            for block in blocks:
                if block.lang == "python":
                    cwd = tmp_path / f"run{attempt}-{block.file}-{block.number}"
                    cwd.mkdir()
                    check_python(block, run_python(block, cwd, running.endpoint))
                else:
                    result = run_shell(block, tmp_path, running.endpoint)
                    assert result.returncode == 0, f"run {attempt}: " + _report(block, result) + "\n--- supervisor log ---\n" + running.log_text()[-4000:]


def readme_steps() -> list[Block]:
    """The README's examples in order, less the set-up blocks (the test environment is set up
    already, and the supervisor their last command starts is started by the test)."""
    return [block for block in parse_blocks(README) if block.lang in ("python", "sh") and SETUP_MARK not in block.code]


def _fake_venv(workdir: Path) -> None:
    """``.venv/bin/python`` in ``workdir``, as the README's set-up leaves it: this interpreter."""
    python = workdir / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(0o755)


@pytest.mark.timeout(240)
def test_readme_runs_in_order_twice(tmp_path: Path) -> None:
    steps = readme_steps()
    assert [block.lang for block in steps].count("python") >= 3 and any(block.lang == "sh" for block in steps)
    assert any(block.lang == "sh" and SETUP_MARK in block.code and "weft_actors.supervisor" in block.code for block in parse_blocks(README))
    _fake_venv(tmp_path)
    with RunningSupervisor(tmp_path / "weft-data", shards=2) as running:  # the first block's supervisor
        for attempt in (1, 2):
            for block in steps:
                if block.lang == "python":  # the default endpoint is this supervisor's
                    block = block._replace(code=block.code.replace(DEFAULT_ENDPOINT, running.endpoint))
                    result = run_python(block, tmp_path, running.endpoint)
                else:
                    result = run_shell(block, tmp_path, running.endpoint)
                assert result.returncode == 0, f"run {attempt}: " + _report(block, result) + "\n--- supervisor log ---\n" + running.log_text()[-4000:]
