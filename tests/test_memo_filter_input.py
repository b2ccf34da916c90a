"""A memo filter typed by a person (``list --memo``, the console's memo field) that no parser
reads is refused in one line with a stable code, never a traceback: JSON nested deeper than
the parser recurses included."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _processes import free_port
from weft_actors._cli_memo import parse_memo_text
from weft_actors.errors import InvalidRequest

DEEP = "k=" + "[" * 5_000 + "]" * 5_000


def test_a_deeply_nested_value_is_refused_by_the_console_field() -> None:
    with pytest.raises(InvalidRequest, match="nested value") as refused:
        parse_memo_text(DEEP)
    assert refused.value.code == "invalid_request"
    with pytest.raises(InvalidRequest, match="only a string"):
        parse_memo_text("k=[]")


@pytest.mark.timeout(60)
def test_a_deeply_nested_value_is_a_usage_error_of_list() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "weft_actors", "list", "--endpoint", f"tcp://127.0.0.1:{free_port()}", "--timeout", "2", "--memo", DEEP],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].endswith("a nested value (10000 characters) is not searchable")
