"""Report how many training scripts were generated and checked, whatever ``-s`` says."""

from __future__ import annotations

from tests.generated.tally import summary


def pytest_terminal_summary(terminalreporter) -> None:
    lines = summary()
    if lines:
        terminalreporter.section("generated training scripts")
        for line in lines:
            terminalreporter.write_line(line)
