"""First contact: a database never migrated, a refused login, a missing database, and the
payload rules every engine shares (no NUL, at most MAX_PAYLOAD_DEPTH levels of nesting).
Each gives portq's own error naming the problem, never a raw driver exception, and
writes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

import portq
from portq.conformance.helpers import counts, not_applicable
from portq.conformance.plugin import raw_connection
from portq.queue import MAX_PAYLOAD_DEPTH
from portq.url import parse_url


def fresh_prefix() -> str:
    """A table prefix no test has migrated."""
    return f"pqnm{uuid.uuid4().hex[:8]}_"


def with_credentials(url: str, *, user: str | None = None, password: str | None = None,
                     database: str | None = None) -> str:
    """``url`` with its user, password or database replaced (the rest kept verbatim)."""
    parts = urlsplit(url)
    old = parse_url(url)
    user = old.username if user is None else user
    password = old.password if password is None else password
    auth = "" if user is None else quote(user, safe="") + (
        "" if password is None else ":" + quote(password, safe="")) + "@"
    host = parts.netloc.rpartition("@")[2]
    path = parts.path if database is None else "/" + quote(database, safe="")
    return urlunsplit((parts.scheme, auth + host, path, parts.query, ""))


def test_unmigrated_database_raises_schema_missing(engine_url: str, qname: str) -> None:
    prefix = fresh_prefix()
    with portq.connect(engine_url, prefix=prefix) as q:
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("stats", q.stats), ("jobs", lambda: q.jobs("dead")),
            ("enqueue", lambda: q.enqueue(qname, 1)),
            ("enqueue_many", lambda: q.enqueue_many([{"queue": qname}, {"queue": qname}])),
            ("claim", lambda: q.claim(qname, "w")), ("reap", q.reap),
            ("prune", lambda: q.prune(0)), ("retry_dead", lambda: q.retry_dead(1)),
            ("cancel", lambda: q.cancel(1)), ("job_errors", lambda: q.job_errors(1)),
            ("check_schema", q.backend.check_schema)]
        for name, call in calls:
            with pytest.raises(portq.SchemaMissingError) as raised:
                call()
            message = str(raised.value)
            assert f"no portq tables with prefix {prefix!r} in {q.url}" in message, name
            assert f"run: portq migrate URL --prefix {prefix}" in message, name
            assert isinstance(raised.value, portq.ConfigurationError)
        conn = raw_connection(q)   # the caller's own transaction
        try:
            with pytest.raises(portq.SchemaMissingError):
                q.enqueue(qname, 1, conn=conn)
            conn.rollback()
        finally:
            conn.close()
        assert q.backend.schema_version() == 0   # nothing was created on the way


def _refused(url: str) -> BaseException | None:
    """The error connecting to ``url`` raised, or None when the server let us in."""
    try:
        with portq.connect(url, pool_timeout=10) as q:
            q.backend.schema_version()
    except portq.CannotConnect as exc:
        return exc
    return None


def test_refused_login_and_missing_database(engine_url: str) -> None:
    parsed = parse_url(engine_url)
    if parsed.engine == "sqlite":
        not_applicable("SQLite has no login and no server-side database")
    missing = f"portq_no_such_db_{uuid.uuid4().hex[:6]}"
    error = _refused(with_credentials(engine_url, database=missing))
    assert isinstance(error, portq.DatabaseMissing), repr(error)
    assert f"database {missing!r} does not exist on" in str(error)
    assert isinstance(error, portq.ConfigurationError)

    secret = "Wr0ng-" + uuid.uuid4().hex[:8]
    error = _refused(with_credentials(engine_url, password=secret))
    if error is None:  # the server took any password (PostgreSQL trust auth): a bad user
        error = _refused(with_credentials(engine_url, user="portq_no_such_user",
                                          password=secret))
    assert isinstance(error, portq.LoginFailed), repr(error)
    assert str(error).startswith("cannot log in to ") and secret not in str(error)
    assert isinstance(error, portq.ConfigurationError)


NUL_PAYLOADS = ["a\x00b", {"k": "\x00"}, {"k\x00": 1}, [[["deep \x00"]]],
                {"outer": {"inner\x00key": [1, 2]}}, "\\\x00"]


def test_nul_is_refused_everywhere_and_nothing_is_written(queue: portq.Queue,
                                                          qname: str) -> None:
    for payload in NUL_PAYLOADS:
        with pytest.raises(portq.PayloadError, match=r"NUL character \(\\u0000\)"):
            queue.enqueue(qname, payload)
        with pytest.raises(portq.PayloadError, match="NUL character"):
            queue.enqueue_many([{"queue": qname, "payload": 1},
                                {"queue": qname, "payload": payload}])
    with pytest.raises(portq.ConfigurationError, match="NUL character"):
        queue.enqueue(qname, 1, key="k\x00")
    with pytest.raises(portq.InvalidQueueName):
        queue.enqueue(qname + "\x00", 1)
    with pytest.raises(portq.ConfigurationError, match="NUL character"):
        queue.claim(qname, "worker\x00id")
    assert counts(queue, qname)["ready"] == 0
    # a backslash followed by "u0000" is ordinary text, not a NUL
    job_id = queue.enqueue(qname, {"\\u0000": "\\u0000"})
    (job,) = queue.claim(qname, "w")
    assert (job.id, job.payload) == (job_id, {"\\u0000": "\\u0000"})
    assert queue.complete(job)


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` containers, alternating arrays and objects, around ``leaf``."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_nesting_limit_is_the_same_on_every_engine(queue: portq.Queue, qname: str) -> None:
    at_limit = [nested(MAX_PAYLOAD_DEPTH), nested(MAX_PAYLOAD_DEPTH - 1, leaf=[]),
                {"wide": [nested(MAX_PAYLOAD_DEPTH - 2)] * 3}]
    ids = [queue.enqueue(qname, payload) for payload in at_limit]
    for past in (nested(MAX_PAYLOAD_DEPTH + 1), nested(MAX_PAYLOAD_DEPTH, leaf={}),
                 {"ok": 1, "deep": [nested(MAX_PAYLOAD_DEPTH)]}, nested(5000)):
        with pytest.raises(portq.PayloadError,
                           match=f"more than {MAX_PAYLOAD_DEPTH} levels deep"):
            queue.enqueue(qname, past)
    jobs = queue.claim(qname, "w", limit=10)
    assert sorted(j.id for j in jobs) == sorted(ids)
    assert sorted((j.payload for j in jobs), key=repr) == sorted(at_limit, key=repr)
    assert queue.complete_many(jobs) == [True] * len(jobs)


def test_error_text_any_engine_cannot_store_is_kept_readable(queue: portq.Queue,
                                                             qname: str) -> None:
    """A handler's error holding NUL or a lone surrogate is still recorded (escaped):
    a failure to record it would leave the job running until its lease expires."""
    queue.enqueue(qname, 1, max_attempts=1)
    (job,) = queue.claim(qname, "w")
    assert queue.fail(job, "bad\x00byte \udc80 here", retry_in=None)
    (dead,) = queue.jobs("dead", queue=qname)
    assert dead.last_error == "bad\\x00byte \\udc80 here"
    assert [e for _, _, e in queue.job_errors(dead.id)] == ["bad\\x00byte \\udc80 here"]
