"""MySQL/MariaDB-specific behaviour, against the real server at PORTQ_TEST_MYSQL_URL
(default: the local MariaDB). Skipped, with the reason, when no server is reachable."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pymysql = pytest.importorskip("pymysql")

import portq  # noqa: E402
from portq.backends.base import ErrorKind  # noqa: E402
from portq.backends.mysql import MysqlBackend  # noqa: E402
from portq.bench import drop_tables  # noqa: E402
from portq.errors import ConfigurationError  # noqa: E402
from portq.sql import bind  # noqa: E402
from portq.url import parse_url  # noqa: E402

URL = os.environ.get("PORTQ_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


def _drop(backend: MysqlBackend) -> None:
    drop_tables(backend)


@pytest.fixture(scope="module")
def queue() -> Iterator[portq.Queue]:
    prefix = f"pqm{uuid.uuid4().hex[:6]}_"
    try:
        q = portq.connect(URL, prefix=prefix, pool_size=16)
        q.migrate()
    except (portq.DatabaseError, pymysql.MySQLError, OSError) as exc:
        pytest.skip(f"no MySQL/MariaDB server reachable at {parse_url(URL).redacted()}: {exc}")
    assert isinstance(q.backend, MysqlBackend)
    yield q
    _drop(q.backend)
    q.close()


@pytest.fixture
def backend(queue: portq.Queue) -> MysqlBackend:
    assert isinstance(queue.backend, MysqlBackend)
    return queue.backend


@pytest.fixture
def qname() -> str:
    return f"my-{uuid.uuid4().hex[:10]}"


def app_connection(**kw: Any) -> Any:
    """A plain application connection: REPEATABLE READ (the server default), autocommit off."""
    url = parse_url(URL)
    return pymysql.connect(host=url.host, port=url.port or 3306, user=url.username,
                           password=url.password or "", database=url.database,
                           autocommit=False, **kw)


def error_of(conn: Any, sql: str, args: Any = None) -> BaseException:
    with pytest.raises(pymysql.MySQLError) as info, conn.cursor() as cur:
        cur.execute(sql, args)
    return info.value


# ---- sessions -------------------------------------------------------------------------

def test_pooled_sessions_are_read_committed_utc_and_strict(backend: MysqlBackend) -> None:
    with backend.transaction() as cur:
        cur.execute("SELECT @@SESSION.time_zone, @@SESSION.sql_mode")
        tz, mode = cur.fetchone()
        try:
            cur.execute("SELECT @@SESSION.transaction_isolation")  # MySQL 8, MariaDB 11.1+
        except pymysql.MySQLError:
            cur.execute("SELECT @@SESSION.tx_isolation")           # MariaDB 10.x
        (isolation,) = cur.fetchone()
    assert isolation == "READ-COMMITTED"
    assert tz == "+00:00"
    assert "STRICT_TRANS_TABLES" in mode.split(",")


def test_descending_index_part_is_honoured(backend: MysqlBackend) -> None:
    with backend.transaction() as cur:
        cur.execute("SELECT COLUMN_NAME, COLLATION FROM information_schema.STATISTICS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND INDEX_NAME = %s "
                    "ORDER BY SEQ_IN_INDEX",
                    (f"{backend.prefix}job", f"{backend.prefix}job_ready_idx"))
        parts = cur.fetchall()
    assert [tuple(p) for p in parts] == [("queue", "A"), ("state", "A"), ("priority", "D"),
                                         ("run_at", "A"), ("job_id", "A")]


def test_concurrent_migrations_serialise(backend: MysqlBackend) -> None:
    results: list[int] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            results.append(backend.migrate())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [backend.latest_version()] * 6


# ---- idempotent enqueue ---------------------------------------------------------------

def test_key_upsert_returns_existing_id_inside_open_transaction(queue: portq.Queue,
                                                                qname: str) -> None:
    conn = app_connection()
    try:
        first = queue.enqueue(qname, {"n": 1}, key=f"{qname}-k", conn=conn)
        again = queue.enqueue(qname, {"n": 2}, key=f"{qname}-k", conn=conn)
        other = queue.enqueue(qname, {"n": 3}, conn=conn)
        assert again == first and other != first
        with conn.cursor() as cur:  # the transaction is still usable, and still open
            cur.execute("SELECT 1")
        assert queue.jobs("ready", queue=qname) == []
        conn.commit()
    finally:
        conn.close()
    rows = queue.jobs("ready", queue=qname)
    assert sorted(r.id for r in rows) == sorted([first, other])
    assert next(r for r in rows if r.id == first).payload == {"n": 1}


def test_key_upsert_sees_key_committed_after_the_callers_snapshot(queue: portq.Queue,
                                                                  qname: str) -> None:
    conn = app_connection()
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        existing = queue.enqueue(qname, {"by": "other"}, key=f"{qname}-k")  # commits
        # a consistent read in conn's snapshot cannot see it; the insert (1062) and the
        # locking read after it can, and created says the job was not made here
        again = queue.enqueue_result(qname, {"by": "app"}, key=f"{qname}-k", conn=conn)
        assert (again.id, again.created) == (existing, False)
        conn.commit()
    finally:
        conn.close()
    assert [r.payload for r in queue.jobs("ready", queue=qname)] == [{"by": "other"}]


def test_keys_differing_only_in_trailing_space_are_distinct(queue: portq.Queue,
                                                            qname: str) -> None:
    a = queue.enqueue(qname, None, key="k")
    b = queue.enqueue(qname, None, key="k ")
    c = queue.enqueue(qname, None, key="K")
    assert len({a, b, c}) == 3
    assert {r.key for r in queue.jobs("ready", queue=qname)} == {"k", "k ", "K"}


# ---- error classification -------------------------------------------------------------

def test_unique_check_and_not_null_violations(backend: MysqlBackend, qname: str) -> None:
    job = f"{backend.prefix}job"
    insert = (f"INSERT INTO {job} (queue, payload, state, run_at, max_attempts, job_key, "
              "created_at) VALUES (%s, %s, %s, UTC_TIMESTAMP(6), 3, %s, UTC_TIMESTAMP(6))")
    conn = backend.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(insert, (qname, "{}", "ready", f"{qname}-u"))
        assert backend.classify(
            error_of(conn, insert, (qname, "{}", "ready", f"{qname}-u"))) is ErrorKind.UNIQUE
        assert backend.classify(
            error_of(conn, insert, (qname, "{}", "bogus", None))) is ErrorKind.CHECK
        assert backend.classify(
            error_of(conn, insert, (qname, "{not json", "ready", None))) is ErrorKind.CHECK
        assert backend.classify(
            error_of(conn, insert, (qname, "{}", "running", None))) is ErrorKind.CHECK
        assert backend.classify(
            error_of(conn, insert, (None, "{}", "ready", None))) is ErrorKind.CHECK
    finally:
        conn.rollback()
        conn.close()


def test_lock_wait_timeout_is_retryable(backend: MysqlBackend, qname: str) -> None:
    job_id = portq.Queue(backend).enqueue(qname, None)
    holder, waiter = backend.connect(), backend.connect()
    try:
        with holder.cursor() as cur:
            cur.execute(f"SELECT job_id FROM {backend.prefix}job WHERE job_id = %s FOR UPDATE",
                        (job_id,))
        with waiter.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
        exc = error_of(waiter, f"UPDATE {backend.prefix}job SET priority = 1 "
                               "WHERE job_id = %s", (job_id,))
        assert exc.args[0] == 1205
        assert backend.classify(exc) is ErrorKind.RETRYABLE
    finally:
        for conn in (holder, waiter):
            conn.rollback()
            conn.close()


def test_deadlock_is_retryable(backend: MysqlBackend, qname: str) -> None:
    q = portq.Queue(backend)
    one, two = q.enqueue(qname, None), q.enqueue(qname, None)
    a, b = backend.connect(), backend.connect()
    lock = f"SELECT job_id FROM {backend.prefix}job WHERE job_id = %s FOR UPDATE"
    found: list[BaseException] = []

    def take(conn: Any, job_id: int) -> None:
        try:
            with conn.cursor() as cur:
                cur.execute(lock, (job_id,))
        except pymysql.MySQLError as exc:
            found.append(exc)
            conn.rollback()
    try:
        take(a, one)
        take(b, two)
        t = threading.Thread(target=take, args=(a, two))  # a waits for b ...
        t.start()
        t.join(0.5)
        take(b, one)                                     # ... and b for a: deadlock
        t.join(10)
        assert [e.args[0] for e in found] == [1213]
        assert backend.classify(found[0]) is ErrorKind.RETRYABLE
    finally:
        for conn in (a, b):
            conn.rollback()
            conn.close()


def test_killed_and_closed_connections_are_connection_errors(backend: MysqlBackend) -> None:
    victim, killer = backend.connect(), backend.connect()
    try:
        with killer.cursor() as cur:
            cur.execute("KILL %s", (victim.thread_id(),))
        exc = error_of(victim, "SELECT 1")
        assert exc.args[0] in (2006, 2013, 1927, 4031)
        assert backend.classify(exc) is ErrorKind.CONNECTION
    finally:
        killer.close()
        victim.close()
    assert backend.classify(error_of(victim, "SELECT 1")) is ErrorKind.CONNECTION


def test_errors_are_classified_after_django_imports_pymysql_as_mysqldb(
        backend: MysqlBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Django with PyMySQL as its MySQLdb (``pymysql.install_as_MySQLdb()``) imports
    ``MySQLdb.err``: err.py runs again as a second module, which the package's ``err``
    attribute then names, while PyMySQL's connections still raise the first one's
    classes. portq still tells a lost connection and a lock wait from other errors (it
    took every error for OTHER: a server going away was no ConnectionLost)."""
    import importlib
    import sys
    before = set(sys.modules)
    monkeypatch.setattr(pymysql, "err", pymysql.err)  # restored when the test ends
    monkeypatch.setitem(sys.modules, "MySQLdb", pymysql)  # what install_as_MySQLdb does
    try:
        second = importlib.import_module("MySQLdb.err")  # what Django's backend imports
    finally:
        for name in set(sys.modules) - before - {"MySQLdb"}:
            del sys.modules[name]  # MySQLdb.err: the module stays only in pymysql.err
    assert pymysql.err is second and second.MySQLError is not pymysql.MySQLError
    victim, killer = backend.connect(), backend.connect()
    try:
        with killer.cursor() as cur:
            cur.execute("KILL %s", (victim.thread_id(),))
        assert backend.classify(error_of(victim, "SELECT 1")) is ErrorKind.CONNECTION
        lock_wait = pymysql.OperationalError(1205, "Lock wait timeout exceeded")
        assert backend.classify(lock_wait) is ErrorKind.RETRYABLE
        assert backend.classify(error_of(killer, "SELECT * FROM no_such_table_x")) is \
            ErrorKind.UNDEFINED_TABLE
    finally:
        killer.close()
        victim.close()
    q = portq.connect("mysql://portq:s3cr3t-pw@127.0.0.1:1/test?connect_timeout=2")
    with pytest.raises(portq.ConnectionLost):
        q.stats()
    q.close()


def test_unreachable_server_raises_connection_lost_without_password() -> None:
    q = portq.connect("mysql://portq:s3cr3t-pw@127.0.0.1:1/test?connect_timeout=2")
    with pytest.raises(portq.ConnectionLost) as info:
        q.stats()
    assert "s3cr3t-pw" not in str(info.value)
    assert "s3cr3t-pw" not in repr(q) and "s3cr3t-pw" not in repr(q.backend)
    q.close()


def test_url_options_are_typed_and_checked() -> None:
    backend = MysqlBackend(parse_url(
        "mysql://u:pw@db.example:3307/app?connect_timeout=3&charset=utf8mb4&ssl_disabled=true"))
    opts = backend.connect_options
    assert opts["connect_timeout"] == 3 and opts["port"] == 3307
    assert opts["ssl_disabled"] is True and opts["autocommit"] is False
    assert "READ COMMITTED" in opts["init_command"]
    assert MysqlBackend(parse_url("mariadb://u@h/app")).connect_options["connect_timeout"] == 10
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        MysqlBackend(parse_url("mysql://u@h/app?connect_timeout=soon"))
    with pytest.raises(ConfigurationError, match="unknown MySQL URL option 'autocommit'"):
        MysqlBackend(parse_url("mysql://u@h/app?autocommit=1"))


# ---- the claim's plan -----------------------------------------------------------------

@pytest.mark.slow
def test_claim_walks_the_ready_index_without_filesort(backend: MysqlBackend) -> None:
    """3 queues x 34,000 ready jobs (~100K): the claim's locking read seeks once into
    portq_job_ready_idx and reads exactly `limit` entries in order, with no sort."""
    tag = uuid.uuid4().hex[:8]
    queues = [f"plan-{tag}-{i}" for i in range(3)]
    job = f"{backend.prefix}job"
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [(qn, (i * 7919) % 10, now - timedelta(seconds=i), now)
            for qn in queues for i in range(34_000)]
    with backend.transaction() as cur:
        cur.executemany(
            f"INSERT INTO {job} (queue, payload, priority, run_at, max_attempts, created_at) "
            "VALUES (%s, '{}', %s, %s, 25, %s)", rows)
    try:
        with backend.transaction() as cur:
            cur.execute(f"ANALYZE TABLE {job}")
            cur.fetchall()
            lock = backend.steps["claim"][0]
            bound = bind(lock, {"queue": queues[1], "limit": 10}, backend.paramstyle)
            sql = cur.mogrify(bound.sql, bound.params)
            cur.execute("EXPLAIN " + sql)
            names = [d[0] for d in cur.description]
            plan = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
            # the job table's row; the pause check is a one-time primary-key SUBQUERY
            plan = [row for row in plan if row["table"] == job]
            assert len(plan) == 1
            assert plan[0]["key"] == f"{backend.prefix}job_ready_idx"
            assert "filesort" not in (plan[0]["Extra"] or "").lower()
            assert "temporary" not in (plan[0]["Extra"] or "").lower()
            cur.execute("FLUSH STATUS")
            cur.execute(sql)
            assert len(cur.fetchall()) == 10
            cur.execute("SHOW SESSION STATUS WHERE Variable_name IN "
                        "('Handler_read_key', 'Handler_read_next', 'Sort_rows')")
            status = {k: int(v) for k, v in cur.fetchall()}
        # one index dive into the ready index (and one primary-key probe of the pause row),
        # then the next 9 entries in order
        assert status == {"Handler_read_key": 2, "Handler_read_next": 9, "Sort_rows": 0}
    finally:
        with backend.transaction() as cur:
            cur.execute(f"DELETE FROM {job} WHERE queue IN (%s, %s, %s)", queues)


@pytest.mark.parametrize("op", ["complete_many", "renew_many"])
def test_fenced_batch_reaches_each_job_by_its_key(queue: portq.Queue, op: str) -> None:
    """The locking read of complete_many/renew_many walks the claims and looks each job up
    by primary key (eq_ref), never another index: a range walk would lock other workers'
    running rows too (MariaDB picked the lease index for a few running rows)."""
    qname = f"plan-{uuid.uuid4().hex[:6]}"
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(200)])
    jobs = queue.claim(qname, "w-plan", limit=5, lease=30)
    backend = queue.backend
    assert isinstance(backend, MysqlBackend)
    lock, _ = backend.steps[op]
    params = {"claims": backend.claims_json([j.claim for j in jobs if j.claim])}
    with backend.transaction(commit=False) as cur:
        backend.execute(cur, "EXPLAIN " + lock, params)
        plan = [(row[2], row[3], row[5]) for row in cur.fetchall()]
    assert plan[0][0] == "c" and plan[1] == ("j", "eq_ref", "PRIMARY"), plan
    assert queue.complete_many(jobs) == [True] * 5


# ---- migration 2: identifiers compare as bytes ----------------------------------------

def test_migration_2_keeps_every_value_and_makes_identifiers_exact() -> None:
    """A table at schema version 1 holding a running job of worker "owner", an error row
    and a state written as 'ready ' by other code (version 1's PAD SPACE CHECK let it in)
    is migrated to 2: values keep their bytes (trailing spaces included) except that state,
    trimmed to what version 1 read it as; the CHECKs are still in force; "owner " is no
    longer "owner"."""
    from portq.sql import load_migrations
    prefix = f"pqv{uuid.uuid4().hex[:6]}_"
    old = MysqlBackend(parse_url(URL), prefix=prefix)
    try:
        # every migration but 2, as on a database migrated before 2 existed (today's
        # claim reads the tables of later migrations); migrate() then applies 2 alone
        migrations = load_migrations("mysql", prefix)
        with old.transaction() as cur:
            old.create_version_table(cur)
            for version, statements in migrations:
                if version != 2:
                    for statement in statements:
                        cur.execute(statement)
                    old.record_version(cur, version)
        q = portq.connect(URL, prefix=prefix)
        job_id = q.enqueue("mail", "x", key="k ")
        (job,) = q.claim("mail", "owner", lease=30)
        stale_id = q.enqueue("mail", "y")
        (stale,) = q.claim("mail", "crashed ", lease=30)
        assert q.fail(stale, "boom", retry_in=0)
        padded_id = q.enqueue("mail", "z", delay=3600)
        with old.transaction() as cur:  # version 1 compares with PAD SPACE
            cur.execute(f"SELECT COUNT(*) FROM {prefix}job WHERE worker_id = 'owner '")
            assert cur.fetchone()[0] == 1
            cur.execute(f"UPDATE {prefix}job SET state = 'ready ' WHERE job_id = %s",
                        (padded_id,))
        assert q.migrate() == max(v for v, _ in migrations)
        q.backend.check_schema()  # 2 is recorded now
        with old.transaction() as cur:
            cur.execute(f"SELECT queue, state, worker_id, job_key FROM {prefix}job "
                        f"WHERE job_id = %s", (job_id,))
            assert cur.fetchone() == (b"mail", b"running", b"owner", b"k ")
            cur.execute(f"SELECT worker_id FROM {prefix}job_error WHERE job_id = %s",
                        (stale_id,))
            assert cur.fetchone() == (b"crashed ",)
            cur.execute(f"SELECT state FROM {prefix}job WHERE job_id = %s", (padded_id,))
            assert cur.fetchone() == (b"ready",)
            cur.execute(f"SELECT COUNT(*) FROM {prefix}job WHERE worker_id = 'owner '")
            assert cur.fetchone()[0] == 0
            for change in ("state = 'ready '", "state = 'exploded'", "queue = ''"):
                with pytest.raises(pymysql.OperationalError) as info:
                    cur.execute(f"UPDATE {prefix}job SET {change} WHERE job_id = %s",
                                (job_id,))
                assert old.classify(info.value) is ErrorKind.CHECK
        assert q.job_errors(stale_id) == [(1, "crashed ", "boom")]
        assert job.claim is not None
        forged = portq.Claim(job.id, job.attempt, "owner ", job.claim.lease_until)
        assert q.complete(forged) is False
        assert q.complete(job) is True
        (record,) = q.jobs("succeeded", queue="mail")
        assert (record.queue, record.state, record.key) == ("mail", "succeeded", "k ")
        q.close()
    finally:
        _drop(old)
        old.close()


@pytest.mark.parametrize("simultaneous", [False, True])
def test_release_keeps_the_budget_whatever_the_assignment_order(
        queue: portq.Queue, backend: MysqlBackend, simultaneous: bool) -> None:
    """``release`` reads the same on MySQL's left-to-right assignments and on MariaDB's
    ``SIMULTANEOUS_ASSIGNMENT`` sql_mode: with max_attempts 3, three give-backs keep the
    attempt (2 * given_back < max_attempts: 0 < 3, 2 < 4, 4 < 5), the fourth spends it."""
    qname = f"rel-{uuid.uuid4().hex[:8]}"
    job_id = queue.enqueue(qname, "x", max_attempts=3)
    seen = []
    for _ in range(4):
        (job,) = queue.claim(qname, "w:1:0", limit=1, lease=30)
        assert job.claim is not None
        with backend.transaction() as cur:
            mode = "CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT')" if simultaneous else \
                "REPLACE(@@sql_mode, 'SIMULTANEOUS_ASSIGNMENT', '')"
            cur.execute(f"SET SESSION sql_mode = {mode}")
            try:
                assert backend.execute(cur, "release", backend.guard(job.claim)).rowcount == 1
            finally:
                cur.execute("SET SESSION sql_mode = REPLACE(@@sql_mode, "
                            "'SIMULTANEOUS_ASSIGNMENT', '')")
        with backend.transaction() as cur:
            cur.execute(f"SELECT attempts, max_attempts, given_back, state FROM "
                        f"{backend.prefix}job WHERE job_id = %s", (job_id,))
            attempts, max_attempts, given_back, state = cur.fetchone()
            seen.append((attempts, max_attempts, given_back, bytes(state).decode()))
    assert seen == [(1, 4, 1, "ready"), (2, 5, 2, "ready"), (3, 6, 3, "ready"),
                    (4, 6, 3, "ready")], seen
