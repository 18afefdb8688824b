"""The conformance suite: one set of pytest tests, parameterised by a database URL, that
proves the invariants of DESIGN.md on any engine (``portq conformance URL``)."""

from __future__ import annotations

from pathlib import Path

SUITE_DIR = Path(__file__).resolve().parent
