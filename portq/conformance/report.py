"""What ``portq conformance`` shows: each test's outcome collected while pytest runs, then
one row per property (portq/conformance/properties.py): passed, failed, skipped or not
applicable to the engine, with the reason."""

from __future__ import annotations

import linecache
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from portq.conformance import NOT_APPLICABLE
from portq.conformance.properties import PROPERTIES, UNMAPPED, property_of

#: every outcome a test can have, in the order the report counts them
OUTCOMES = ("passed", "failed", "skipped", "not_applicable")
#: where pytest's long traceback text says an exception was raised: ``path:12: Error``
CRASH_LINE = re.compile(r"^(\S+\.py):(\d+): \w")
#: a failed test's reason names a step of this host's system clock (against its
#: monotonic clock) during the test from this size: leases, due times and the local
#: engine's clock read the system clock, a test's waits the monotonic one
CLOCK_STEP_S = 0.05


@dataclass
class TestOutcome:
    name: str          # test function name with parameters, e.g. test_cancel[postgres]
    nodeid: str
    outcome: str       # passed, failed, skipped, not_applicable (see NOT_APPLICABLE)
    reason: str = ""
    seconds: float = 0.0


@dataclass
class PropertyResult:
    name: str
    status: str        # passed, failed, skipped, not_applicable
    tests: list[TestOutcome] = field(default_factory=list)

    @property
    def reason(self) -> str:
        """Why it failed (the first failing test), else the first skip's reason, else the
        first reason a test did not apply."""
        for wanted in ("failed", "skipped", "not_applicable"):
            for t in self.tests:
                if t.outcome == wanted:
                    return f"{t.name}: {t.reason}" if wanted == "failed" else t.reason
        return ""

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for t in self.tests:
            out[t.outcome] += 1
        return out


class Collector:
    """A pytest plugin object recording every test's outcome (no terminal output but a
    dot per test on stderr)."""

    def __init__(self, progress: bool = True) -> None:
        self.outcomes: dict[str, TestOutcome] = {}
        self.errors: list[str] = []     # collection errors
        self.progress = progress
        self._clock_at_start = 0.0      # the current test's clock_offset() at its start

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int, str]) -> None:
        self._clock_at_start = clock_offset()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = report.nodeid.split("::")[-1]
        current = self.outcomes.get(report.nodeid)
        if report.when == "call" or report.outcome != "passed":
            if current is not None and current.outcome != "passed":
                return                   # keep the first failure or skip (e.g. setup)
            outcome: str = report.outcome if report.outcome in ("passed", "skipped") \
                else "failed"
            reason = _reason(report)
            if outcome == "failed":
                reason += clock_step_note(clock_offset() - self._clock_at_start)
            if outcome == "skipped" and reason.startswith(NOT_APPLICABLE):
                outcome, reason = "not_applicable", reason.removeprefix(NOT_APPLICABLE)
            self.outcomes[report.nodeid] = TestOutcome(
                name, report.nodeid, outcome, reason, report.duration)
        if report.when == "teardown" and self.progress:
            mark = {"passed": ".", "failed": "F", "skipped": "s", "not_applicable": "-"}
            got = self.outcomes.get(report.nodeid)
            sys.stderr.write(mark.get(got.outcome, "?") if got else "?")
            sys.stderr.flush()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"{report.nodeid}: {_first_line(str(report.longrepr))}")

    def properties(self) -> list[PropertyResult]:
        """One result per property that had tests in this run, in the table's order."""
        grouped: dict[str, list[TestOutcome]] = {}
        for t in self.outcomes.values():
            grouped.setdefault(property_of(t.name), []).append(t)
        order = [p.name for p in PROPERTIES] + [UNMAPPED]
        out = []
        for name in order:
            tests = grouped.get(name)
            if not tests:
                continue
            outcomes = {t.outcome for t in tests}
            status = next(o for o in ("failed", "passed", "skipped", "not_applicable")
                          if o in outcomes)
            out.append(PropertyResult(name, status, tests))
        return out


def clock_offset() -> float:
    """The system clock less the monotonic one: a change is a step of the system clock."""
    return time.time() - time.monotonic()


def clock_step_note(step: float) -> str:
    """What a failed test's reason adds when the system clock stepped during it."""
    if abs(step) < CLOCK_STEP_S:
        return ""
    return f" [this host's system clock stepped {step:+.2f} s during the test]"


def _reason(report: pytest.TestReport) -> str:
    if report.skipped:
        longrepr: Any = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            return str(longrepr[2]).removeprefix("Skipped: ")
        return _first_line(str(longrepr))
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            return _first_line(str(crash.message)) + _where(str(crash.path), crash.lineno,
                                                            with_source=True)
        return _error_line(str(report.longrepr))
    return ""


def _where(path: str, lineno: int | str, with_source: bool = False) -> str:
    """Where a failure was raised: `` (file.py:12)``, with ``with_source`` that line's
    source too, `` (file.py:12: assert x)`` (an ``assert False`` alone does not say which
    of a test's waits ran out)."""
    source = linecache.getline(path, int(lineno)).strip() if with_source else ""
    return f" ({Path(path).name}:{lineno}" + (f": {source})" if source else ")")


def _error_line(text: str) -> str:
    """The exception line of a traceback as text (pytest's ``E   ...`` line) and where it
    was raised (its last ``path:line:`` line), else its first line: the plugin hands over
    scrubbed text, which has no ``reprcrash``."""
    lines = text.splitlines()
    error = next((line[1:].strip() for line in lines if line.startswith("E ")), None)
    if error is None:
        return _first_line(text)
    located = [m for m in map(CRASH_LINE.match, lines) if m]
    return error + (_where(located[-1][1], located[-1][2]) if located else "")


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else ""


def render_table(results: list[PropertyResult]) -> list[str]:
    """Rows ``property  status  tests  reason`` as aligned text lines."""
    rows = [("property", "result", "tests", "reason")]
    for r in results:
        c = r.counts()
        asides = [f"{c[o]} {label}" for o, label in (("skipped", "skipped"),
                                                     ("not_applicable", "n/a"))
                  if c[o] and r.status != o]
        tally = f"{c['passed']}/{len(r.tests)}" + (f" ({', '.join(asides)})" if asides else "")
        status = {"failed": "FAILED", "not_applicable": "n/a"}.get(r.status, r.status)
        rows.append((r.name, status, tally, r.reason[:120]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return ["  ".join([*(row[i].ljust(widths[i]) for i in range(3)), row[3]]).rstrip()
            for row in rows]


def properties_json(results: list[PropertyResult]) -> list[dict[str, Any]]:
    return [{"property": r.name, "result": r.status, "reason": r.reason, **r.counts(),
             "tests": [{"test": t.name, "result": t.outcome, "reason": t.reason,
                        "seconds": round(t.seconds, 3)} for t in r.tests]}
            for r in results]
