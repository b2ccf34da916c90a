"""Shows the chaos runs' summary lines (seed first) at the end of the pytest report."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest's signature
    # Each chaos test's summary line travels in its report (``user_properties``), so a
    # worker process's run reaches the controller's summary as well.
    lines = [value for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []) for name, value in getattr(report, "user_properties", ()) if name == "chaos"]
    if lines:
        terminalreporter.section("chaos")
        for line in lines:
            terminalreporter.write_line(line)
