"""Times written and read on a caller's PostgreSQL connection whose session TimeZone is not
UTC and whose timestamptz loader returns naive local times (what Django sets up with
USE_TZ = False): portq stores and reports the same instants as on its own connections."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg.types.datetime import TimestamptzLoader  # noqa: E402

import portq  # noqa: E402

URL = os.environ.get("PORTQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


class NaiveLocalLoader(TimestamptzLoader):  # type: ignore[misc]
    """Loads timestamptz as a naive time in the session's zone (Django, USE_TZ=False)."""

    def load(self, data: Any) -> datetime:
        value: datetime = super().load(data)
        return value.replace(tzinfo=None)


@pytest.fixture
def queue() -> Iterator[portq.Queue]:
    try:
        q = portq.connect(URL)
        q.migrate()
    except portq.errors.CannotConnect as exc:
        if "postgres" in os.environ.get("PORTQ_REQUIRE_ENGINES", ""):
            raise
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    yield q
    q.close()


def test_a_caller_connection_in_another_time_zone_keeps_the_instants(
        queue: portq.Queue) -> None:
    name = f"tz-{uuid.uuid4().hex[:8]}"
    run_at = datetime.now(UTC).replace(microsecond=123456) + timedelta(hours=2)
    conn = queue.backend.open_connection()  # the application's connection
    job_id = 0
    try:
        conn.execute("SET TimeZone = 'Asia/Kolkata'")
        conn.adapters.register_loader("timestamptz", NaiveLocalLoader)
        job_id = queue.enqueue(name, "x", run_at=run_at, conn=conn)
        mine = queue.job(job_id, conn=conn)  # read in the caller's open transaction
        assert mine is not None and mine.run_at == run_at
        assert mine.created_at is not None and mine.created_at.tzinfo is not None
        conn.commit()
        own = queue.job(job_id)
        assert own is not None and own.run_at == run_at and own.created_at == mine.created_at
        # the caller's own loader is untouched
        (local,) = conn.execute("SELECT run_at FROM portq_job WHERE job_id = %s",
                                [job_id]).fetchone()
        kolkata = run_at.astimezone(ZoneInfo("Asia/Kolkata")).replace(tzinfo=None)
        assert local.tzinfo is None and local == kolkata
    finally:
        conn.close()
        if job_id:
            queue.cancel(job_id)
