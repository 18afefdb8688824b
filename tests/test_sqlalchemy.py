"""Transactional enqueue through SQLAlchemy 2 Sessions and Connections, on real engines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts
from portq.conformance.plugin import TEST_PREFIX
from portq.url import parse_url

sa = pytest.importorskip("sqlalchemy")
orm = pytest.importorskip("sqlalchemy.orm")

# portq's plain scheme -> the SQLAlchemy dialect+driver portq's backend uses
SA_SCHEMES = {"postgres": "postgresql+psycopg", "mysql": "mysql+pymysql", "sqlite": "sqlite"}


def sqlalchemy_url(url: str) -> str:
    engine = parse_url(url).engine
    if engine not in SA_SCHEMES:
        pytest.skip(f"no SQLAlchemy test for {engine}")
    return SA_SCHEMES[engine] + "://" + url.split("://", 1)[1]


@pytest.fixture(scope="module")
def sa_engine(engine_url: str) -> Iterator[Any]:
    engine = sa.create_engine(sqlalchemy_url(engine_url))
    yield engine
    engine.dispose()


def test_session_commit_is_visible_rollback_is_not(queue: portq.Queue, qname: str,
                                                   sa_engine: Any) -> None:
    with orm.Session(sa_engine) as session:
        queue.enqueue(qname, {"n": 1}, conn=session)
        assert counts(queue, qname)["ready"] == 0, "uncommitted job visible to others"
        session.rollback()
        # the session stays usable after portq wrote through it
        assert session.execute(sa.text("SELECT 1")).scalar() == 1
        committed = queue.enqueue(qname, {"n": 2}, conn=session)
        assert counts(queue, qname)["ready"] == 0
        session.commit()
        assert session.execute(sa.text("SELECT 2")).scalar() == 2
    jobs = queue.claim(qname, "w", limit=10)
    assert [(j.id, j.payload) for j in jobs] == [(committed, {"n": 2})]


def test_connection_commit_and_rollback(queue: portq.Queue, qname: str,
                                        sa_engine: Any) -> None:
    with sa_engine.connect() as conn:
        queue.enqueue(qname, "gone", conn=conn)
        conn.rollback()
        kept = queue.enqueue(qname, "kept", conn=conn)
        conn.commit()
    with pytest.raises(RuntimeError, match="boom"), sa_engine.begin() as conn:
        queue.enqueue(qname, "also gone", conn=conn)
        raise RuntimeError("boom")
    assert [(j.id, j.payload) for j in queue.claim(qname, "w", limit=10)] == [(kept, "kept")]


def test_keys_are_idempotent_through_a_session(queue: portq.Queue, qname: str,
                                               sa_engine: Any) -> None:
    existing = queue.enqueue(qname, "old", key=f"{qname}-k")
    with orm.Session(sa_engine) as session:
        again = queue.enqueue(qname, "new", key=f"{qname}-k", conn=session)
        fresh = queue.enqueue(qname, "a", key=f"{qname}-fresh", conn=session)
        same = queue.enqueue(qname, "b", key=f"{qname}-fresh", conn=session)
        session.commit()  # the key conflicts did not abort the transaction
    assert again == existing and same == fresh != existing
    assert counts(queue, qname)["ready"] == 2


def test_engine_and_foreign_driver_are_refused(queue: portq.Queue, qname: str,
                                               sa_engine: Any, tmp_path: Any) -> None:
    with pytest.raises(portq.ConfigurationError, match="Engine"):
        queue.enqueue(qname, 1, conn=sa_engine)
    other_engine = "sqlite" if queue.backend.engine != "sqlite" else None
    if other_engine:
        foreign = sa.create_engine(f"sqlite:///{tmp_path / 'other.db'}")
        with foreign.connect() as conn, pytest.raises(portq.ConfigurationError,
                                                      match="needs a"):
            queue.enqueue(qname, 1, conn=conn)
        foreign.dispose()
    assert counts(queue, qname)["ready"] == 0


def test_same_url_string_opens_sqlalchemy_and_portq(engine_url: str, qname: str) -> None:
    url = sqlalchemy_url(engine_url)
    engine = sa.create_engine(url)
    try:
        with portq.connect(url, prefix=TEST_PREFIX) as q, orm.Session(engine) as session:
            job_id = q.enqueue(qname, "via one URL", conn=session)
            session.commit()
            assert [j.id for j in q.claim(qname, "w")] == [job_id]
    finally:
        engine.dispose()


@pytest.mark.parametrize(("url", "engine"), [
    ("postgresql+psycopg://app:s3cret@db.example:5432/shop", "postgres"),
    ("mysql+pymysql://app:s3cret@db.example:3306/shop", "mysql"),
    ("mssql+pyodbc://app:s3cret@db.example:1433/shop?driver=ODBC+Driver+18", "sqlserver"),
    ("oracle+oracledb://app:s3cret@db.example:1521/?service_name=FREEPDB1", "oracle"),
    ("sqlite:///shop.db", "sqlite"),
])
def test_sqlalchemy_url_forms_parse_in_both(url: str, engine: str) -> None:
    sa_url = sa.engine.make_url(url)
    ours = parse_url(url)
    assert ours.engine == engine
    assert (ours.host, ours.port, ours.username, ours.database or None) == \
        (sa_url.host, sa_url.port, sa_url.username, sa_url.database or None)
    assert "s3cret" not in repr(ours) and "s3cret" not in ours.redacted()


def test_enqueue_result_through_a_session_tells_new_from_existing(
        queue: portq.Queue, qname: str, sa_engine: Any) -> None:
    """SQLAlchemy's MySQL connections count an unchanged upserted row as affected
    (CLIENT.FOUND_ROWS): the result must still say the key's job existed."""
    with orm.Session(sa_engine) as session:
        first = queue.enqueue_result(qname, 1, key=f"{qname}-k", conn=session)
        again = queue.enqueue_result(qname, 2, key=f"{qname}-k", conn=session)
        session.commit()
    assert first.created and not again.created and again.id == first.id
    with orm.Session(sa_engine) as session:
        later = queue.enqueue_result(qname, 3, key=f"{qname}-k", conn=session)
        session.commit()
    assert (later.id, later.created) == (first.id, False)
