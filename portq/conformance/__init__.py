"""The conformance suite: one set of pytest tests, parameterised by a database URL, that
proves the invariants of docs/design.md on any engine (``portq conformance URL``)."""

from __future__ import annotations

from pathlib import Path

SUITE_DIR = Path(__file__).resolve().parent
#: the suite's table prefix: conformance tables never touch an application's portq_ tables
#: (here, not in the plugin, so that the CLI builds its parser where pytest is missing)
TEST_PREFIX = "portqt_"
#: the skip reason's prefix that marks a test as not applicable to the engine (it checks a
#: feature the engine does not have); ``portq conformance`` counts these apart from skips
NOT_APPLICABLE = "not applicable: "
