"""Shows the chaos runs' summary lines (seed first) at the end of the pytest report."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest's signature
    lines = getattr(config, "weft_chaos_summaries", None)
    if lines:
        terminalreporter.section("chaos")
        for line in lines:
            terminalreporter.write_line(line)
