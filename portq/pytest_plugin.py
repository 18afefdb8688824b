"""pytest fixtures for applications' tests (registered by portq's ``pytest11`` entry point;
or ``pytest_plugins = ["portq.pytest_plugin"]``). See :mod:`portq.testing`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from portq.queue import Queue, connect


@pytest.fixture
def portq_url(tmp_path: Path) -> str:
    """``PORTQ_TESTING_URL``, or a fresh SQLite file in the test's temporary directory."""
    return os.environ.get("PORTQ_TESTING_URL") or f"sqlite:///{tmp_path / 'portq.db'}"


@pytest.fixture
def portq_queue(portq_url: str) -> Iterator[Queue]:
    """A migrated :class:`~portq.Queue` on :func:`portq_url`, closed after the test."""
    queue = connect(portq_url)
    try:
        queue.migrate()
        yield queue
    finally:
        queue.close()
