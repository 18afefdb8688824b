"""Migrations numbered below the newest applied one (branches merged out of order: 5 applied
before 3 existed) still run: migrate() applies every version not recorded, and
check_schema() refuses a schema that lacks one. Live on every reachable engine."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import portq
from portq.bench import drop_tables
from portq.errors import SchemaError
from portq.sql import load_migrations


@pytest.fixture
def fresh(engine_url: str) -> Iterator[portq.Queue]:
    """A Queue on its own table prefix, dropped afterwards."""
    q = portq.connect(engine_url, prefix=f"pqg{uuid.uuid4().hex[:6]}_")
    try:
        yield q
    finally:
        drop_tables(q.backend)
        q.close()


def test_a_lower_migration_added_later_is_applied(fresh: portq.Queue) -> None:
    backend = fresh.backend
    versions = [v for v, _ in load_migrations(backend.engine)]
    assert 3 in versions and max(versions) > 3
    assert fresh.migrate() == max(versions)
    # as if migration 3 had not existed when this database was migrated
    def forget(cur: object) -> None:
        backend.execute(cur, f"DROP TABLE {backend.prefix}worker")
        backend.execute(cur, f"DELETE FROM {backend.prefix}schema_version WHERE version = 3")
    backend.run("forget", forget, retry=False)
    with pytest.raises(SchemaError, match=r"lacks portq migration\(s\) \[3\]"):
        backend.check_schema()
    assert fresh.migrate() == max(versions)
    backend.check_schema()
    assert backend.workers() == [], "the worker table was not created again"
