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

README.md is not collected: its tour imports a user module ``orders`` that does not exist
(it shows the layout of a user's app), its ``cart`` snippet is a fragment, and its client
example needs a server on the default port. The user guide carries runnable versions of the
same examples.
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

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
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
    # docs/ only: the repository's README.md is left out on purpose (see the module docstring:
    # its examples import a user module that does not exist, or are fragments).
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


def test_docs_exist_and_have_examples() -> None:
    names = {path.name for path in doc_files()}
    assert {"README.md", "user-guide.md", "guarantees.md", "operations.md", "architecture.md"} <= names
    assert len(PYTHON) >= 15 and len(SHELL) >= 3


@pytest.mark.parametrize("block", PYTHON, ids=[block.id for block in PYTHON])
def test_python_example(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    endpoint = request.getfixturevalue("supervisor").endpoint if needs_server(block) else None
    script = tmp_path / f"example_{block.number}.py"
    script.write_text(block.code, encoding="utf-8")
    try:
        result = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=_env(endpoint), capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.id}: did not finish within {TIMEOUT}s\n{exc.stdout}\n{exc.stderr}")
    assert result.returncode == 0, _report(block, result)
    if block.output is not None:
        assert _normalise(result.stdout) == _normalise(block.output), f"{block.id}: output differs from the docs\n" + _report(block, result)


@pytest.mark.parametrize("block", SHELL, ids=[block.id for block in SHELL])
def test_shell_example(block: Block, supervisor: Any) -> None:
    try:
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.code],
            cwd=supervisor.workdir,
            env=_env(supervisor.endpoint),
            capture_output=True,
            text=True,
            timeout=TIMEOUT * 2,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.id}: did not finish within {TIMEOUT * 2}s\n{exc.stdout}\n{exc.stderr}")
    assert result.returncode == 0, _report(block, result) + "\n--- supervisor log ---\n" + supervisor.log_text()[-4000:]
