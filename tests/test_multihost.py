"""Multi-host URLs (libpq host lists), the LISTEN option for poolers, the server identity a
connection reached, and the MySQL/MariaDB path (one proxy address) surviving a proxy cut."""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from tcpproxy import TcpProxy

import portq
from portq.backends.postgres import libpq_kwargs
from portq.conformance.helpers import counts, run_portq, wait_until
from portq.errors import CannotConnect, ConfigurationError
from portq.job import Job
from portq.protocol import ServerIdentity
from portq.url import parse_url
from portq.worker import Worker

PG = os.environ.get("PORTQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL = os.environ.get("PORTQ_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
PREFIX = "portqmh_"


def _migrated(text: str, label: str) -> Any:
    """``text`` parsed, with portq's tables there; skip when its server is not reachable."""
    url = parse_url(text)
    try:
        with portq.connect(text, prefix=PREFIX, pool_size=1) as q:
            q.migrate()
    except portq.DatabaseError as exc:
        pytest.skip(f"no {label} at {url.redacted()}: {exc}")
    return url


def _pg() -> Any:
    return _migrated(PG, "PostgreSQL")


def _with_hosts(url: Any, netloc: str, query: str = "") -> str:
    """``url`` (a parsed single-host URL) with ``netloc`` as its host list."""
    auth = url.username + (":" + quote(url.password, safe="") if url.password else "") + "@" \
        if url.username else ""
    return f"{url.scheme}://{auth}{netloc}/{url.database}" + (f"?{query}" if query else "")


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- parsing ------------------------------------------------------------------------------

def test_libpq_host_lists_parse_with_their_ports() -> None:
    url = parse_url("postgresql://app:s3cr3t@db1:5432,db2:5433,[::1],db4/shop"
                    "?target_session_attrs=read-write&load_balance_hosts=random")
    assert url.hosts == (("db1", 5432), ("db2", 5433), ("::1", None), ("db4", None))
    assert (url.host, url.port, url.multi_host) == ("db1", 5432, True)
    assert url.query == {"target_session_attrs": "read-write", "load_balance_hosts": "random"}
    kw = libpq_kwargs(url)
    assert (kw["host"], kw["port"]) == ("db1,db2,::1,db4", "5432,5433,5432,5432")
    assert kw["target_session_attrs"] == "read-write" and kw["password"] == "s3cr3t"
    shown = url.redacted()
    assert shown == ("postgresql://app:***@db1:5432,db2:5433,[::1],db4/shop"
                     "?target_session_attrs=read-write&load_balance_hosts=random")
    assert "s3cr3t" not in repr(url) and "s3cr3t" not in str(url)
    # one host: as before, no port list
    single = parse_url("postgresql://app@db1/shop")
    assert single.hosts == (("db1", None),) and "port" not in libpq_kwargs(single)


def test_sqlalchemy_host_list_spelling_is_the_same_list() -> None:
    """SQLAlchemy's psycopg dialect spells a host list as repeated ``host=`` options."""
    a = parse_url("postgresql+psycopg://app:pw@/shop?host=db1:5432&host=db2:5433"
                  "&target_session_attrs=primary")
    b = parse_url("postgresql+psycopg://app:pw@db1:5432,db2:5433/shop"
                  "?target_session_attrs=primary")
    assert a.hosts == b.hosts == (("db1", 5432), ("db2", 5433))
    assert a.query == b.query and libpq_kwargs(a) == libpq_kwargs(b)


def test_libpq_keyword_host_lists_are_the_same_list() -> None:
    """libpq's keyword spelling, ``?host=h1,h2&port=p1,p2`` (or one port for all), with
    an empty host part."""
    a = parse_url("postgresql://app:pw@/shop?host=db1,db2&port=5432,5433&sslmode=prefer")
    b = parse_url("postgresql://app:pw@db1:5432,db2:5433/shop?sslmode=prefer")
    assert a.hosts == b.hosts and a.query == b.query == {"sslmode": "prefer"}
    assert parse_url("postgresql://app@/shop?host=db1,db2&port=6432").hosts == (
        ("db1", 6432), ("db2", 6432))
    with pytest.raises(ConfigurationError, match="lists 2 hosts but 3 ports"):
        parse_url("postgresql://app@/shop?host=db1,db2&port=1,2,3")


def test_unix_socket_urls_parse_as_libpq_reads_them() -> None:
    """libpq's two spellings of a Unix socket directory ("either omit the host part of the
    URI and specify the host as a named parameter, or percent-encode the path in the host
    part"), in a host list too, and no host at all (libpq's default socket): each gives
    libpq that directory, or no host, and its URL form parses back to the same hosts."""
    cases = {
        "postgresql://app:pw@/shop?host=/var/run/postgresql&port=5433&sslmode=disable":
            ((("/var/run/postgresql", 5433),), {"host": "/var/run/postgresql", "port": "5433"}),
        "postgresql://app:pw@%2Fvar%2Frun%2FPostgreSQL:5433/shop":
            ((("/var/run/PostgreSQL", 5433),), {"host": "/var/run/PostgreSQL", "port": "5433"}),
        "postgresql://app@%2Ftmp,db2:6432/shop?target_session_attrs=read-write":
            ((("/tmp", None), ("db2", 6432)), {"host": "/tmp,db2", "port": "5432,6432"}),
        "postgresql://app@/shop?host=/tmp,db2&port=5432,6432":
            ((("/tmp", 5432), ("db2", 6432)), {"host": "/tmp,db2", "port": "5432,6432"}),
        "postgresql://app:pw@/shop": ((), {}),
        "postgresql:///shop?port=5433": ((), {"port": "5433"}),
    }
    for text, (hosts, conninfo) in cases.items():
        url = parse_url(text)
        assert url.hosts == hosts, text
        kw = libpq_kwargs(url)
        assert {k: kw[k] for k in ("host", "port") if k in kw} == conninfo, text
        assert kw["dbname"] == "shop" and "pw" not in url.redacted()
        again = parse_url(url.redacted().replace(":***@", "@"))
        assert (again.hosts, again.query) == (url.hosts, url.query), url.redacted()
    assert parse_url("postgresql://app@%2Ftmp/shop").redacted() == \
        "postgresql://app@%2Ftmp/shop"
    with pytest.raises(ConfigurationError, match="names no host"):
        parse_url("mariadb://root@/shop")  # PyMySQL has no default to fall back on


def _record(done: list[int], job: Job) -> None:
    done.append(job.id)


def test_a_unix_socket_url_connects_and_runs_a_worker() -> None:
    """Both socket spellings reach the test server through its Unix socket (when it has
    one here), and a worker claims and completes through it, LISTEN included."""
    url = _pg()
    sockets = [d for d in ("/var/run/postgresql", "/run/postgresql", "/tmp")
               if os.path.exists(f"{d}/.s.PGSQL.{url.port or 5432}")]
    if not sockets or url.host not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip(f"no local Unix socket of the test server {url.redacted()}")
    auth = url.username + (":" + quote(url.password, safe="") if url.password else "") + "@" \
        if url.username else ""
    port = url.port or 5432
    for text in (f"postgresql://{auth}/{url.database}?host={sockets[0]}&port={port}",
                 f"postgresql://{auth}{quote(sockets[0], safe='')}:{port}/{url.database}"):
        done: list[int] = []
        with portq.connect(text, prefix=PREFIX) as q:
            conn = q.backend.open_connection()
            try:  # a Unix socket connection: the server sees no client address
                assert conn.execute("SELECT inet_client_addr()").fetchone() == (None,)
            finally:
                conn.close()
            qname = f"sock-{uuid.uuid4().hex[:8]}"
            job_id = q.enqueue(qname, {"n": 1})
            worker = Worker(q, qname, functools.partial(_record, done), concurrency=1,
                            burst=True, idle_min=0.01)
            worker.run()
            record = q.job(job_id)
            assert done == [job_id] and record is not None and record.state == "succeeded"
            assert q.backend.listen_mode == "LISTEN on the queue's URL"
            assert url.password is None or url.password not in repr(q.backend.url)


@pytest.mark.parametrize("url,message", [
    ("postgresql://u@h1:5432,h2:x/db", "malformed host 'h2:x'"),
    ("postgresql://u@h1,,h2/db", "malformed host ''"),
    ("postgresql://u@h1,h2/db?target_session_attrs=rw", "target_session_attrs='rw'"),
    ("postgresql://u@h1,h2/db?load_balance_hosts=yes", "load_balance_hosts='yes'"),
    ("mysql://u:pw@h1:3306,h2:3306/db", "a proxy or a virtual IP"),
    ("mariadb://u@h1,h2/db", "PostgreSQL's (libpq) form"),
    ("mssql://u@h1,h2/db", "lists 2 hosts"),
    ("oracle://u@h1,h2/db", "lists 2 hosts"),
])
def test_bad_host_lists_are_named(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(
            ")", r"\)")) as info:
        parse_url(url)
    assert "pw@" not in str(info.value)


def test_listen_url_secrets_are_redacted_everywhere() -> None:
    inner = "postgresql://app:inner-secret@db0:5432/shop"
    url = parse_url("postgresql://app:outer-secret@pgb1:6432,pgb2:6432/shop?listen_url="
                    + quote(inner, safe=""))
    shown = url.redacted()
    assert "inner-secret" not in shown and "outer-secret" not in shown
    assert "listen_url=postgresql://app:***@db0:5432/shop" in shown
    assert {"inner-secret", "outer-secret"} <= set(url.secrets())
    assert "listen_url" not in libpq_kwargs(url)  # portq's own option, never libpq's


def test_listen_url_must_be_postgresql() -> None:
    with pytest.raises(ConfigurationError, match="not a PostgreSQL URL"):
        portq.connect("postgresql://u@h/db?listen_url=" + quote("mysql://u:pw@h/db", safe=""))


# ---- live PostgreSQL --------------------------------------------------------------------

def test_connect_skips_a_dead_host_and_reads_the_server_identity() -> None:
    url = _pg()
    dead = _dead_port()
    listed = _with_hosts(url, f"127.0.0.1:{dead},{url.host}:{url.port or 5432}",
                         "target_session_attrs=read-write")
    with portq.connect(listed, prefix=PREFIX, pool_size=2) as q:
        qname = f"mh-{uuid.uuid4().hex[:8]}"
        job_id = q.enqueue(qname, {"n": 1})
        assert q.job(job_id) is not None
        identity = q.backend.server_identity()
        conn = q.backend.pool.acquire()
        try:
            row = conn.execute("SELECT system_identifier::text, timeline_id FROM "
                               "pg_control_system(), pg_control_checkpoint()").fetchone()
            conn.rollback()
        finally:
            q.backend.pool.release(conn)
        assert identity == ServerIdentity(row[0], int(row[1]))
        assert f"127.0.0.1:{dead},{url.host}" in q.url
    with portq.connect(_with_hosts(url, f"{url.host}:{url.port or 5432},127.0.0.1:{dead}",
                                   "load_balance_hosts=random"), prefix=PREFIX) as q:
        # a random order of one live and one dead host: every connection still succeeds
        for _ in range(6):
            conn = q.backend.open_connection()
            assert conn.info.port == (url.port or 5432)
            conn.close()
        assert q.job(job_id) is not None


def test_keyword_host_list_connects() -> None:
    url = _pg()
    auth = url.username + "@" if url.username else ""
    text = (f"postgresql://{auth}/{url.database}?host=127.0.0.1,{url.host}"
            f"&port={_dead_port()},{url.port or 5432}&target_session_attrs=read-write")
    if url.password:
        pytest.skip("the test server's URL has a password; this spelling is checked without")
    with portq.connect(text, prefix=PREFIX) as q:
        job_id = q.enqueue(f"mh-{uuid.uuid4().hex[:8]}", 1)
        assert q.job(job_id) is not None
        assert q.backend.url.multi_host


def test_a_host_list_of_only_standbys_is_refused_for_read_write() -> None:
    url = _pg()
    listed = _with_hosts(url, f"{url.host}:{url.port or 5432}", "target_session_attrs=standby")
    with pytest.raises(CannotConnect) as info, \
            portq.connect(listed, prefix=PREFIX, pool_size=1) as q:
        q.stats("x")
    assert "standby" in str(info.value) and (url.password or "\0") not in str(info.value)


def test_cli_takes_a_host_list(tmp_path: Path) -> None:
    url = _pg()
    listed = _with_hosts(url, f"127.0.0.1:{_dead_port()},{url.host}:{url.port or 5432}",
                         "target_session_attrs=read-write")
    qname = f"mh-{uuid.uuid4().hex[:8]}"
    run_portq("migrate", "--prefix", PREFIX, env={"PORTQ_URL": listed})
    out = run_portq("enqueue", "--prefix", PREFIX, "--queue", qname, "--json", "--payload",
                    "{}", env={"PORTQ_URL": listed}).stdout
    assert json.loads(out)["id"] > 0
    (row,) = json.loads(run_portq("stats", "--prefix", PREFIX, "--queue", qname, "--json",
                                  env={"PORTQ_URL": listed}).stdout)
    assert row["ready"] == 1


def test_dashboard_names_every_host_and_no_password() -> None:
    from portq.web.context import database_label
    url = _pg()
    listed = _with_hosts(url, f"127.0.0.1:{_dead_port()},{url.host}:{url.port or 5432}")
    with portq.connect(listed, prefix=PREFIX) as q:
        label = database_label(q)
    assert label.startswith("postgres · 127.0.0.1:") and f",{url.host}" in label
    assert "@" not in label


def test_sqlalchemy_engine_and_portq_share_one_host_list_url() -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    url = _pg()
    dead = _dead_port()
    auth = url.username + (":" + quote(url.password, safe="") if url.password else "")
    text = (f"postgresql+psycopg://{auth}@/{url.database}?host=127.0.0.1:{dead}"
            f"&host={url.host}:{url.port or 5432}&target_session_attrs=read-write")
    engine = sqlalchemy.create_engine(text)
    qname = f"mh-{uuid.uuid4().hex[:8]}"
    try:
        with portq.connect(text, prefix=PREFIX) as q, engine.begin() as conn:
            job_id = q.enqueue(qname, {"via": "sqlalchemy"}, conn=conn)
        with portq.connect(text, prefix=PREFIX) as q:
            record = q.job(job_id)
            assert record is not None and record.payload == {"via": "sqlalchemy"}
    finally:
        engine.dispose()


def test_start_up_line_says_how_new_jobs_are_found(caplog: pytest.LogCaptureFixture) -> None:
    url = _pg()
    direct = _with_hosts(url, f"{url.host}:{url.port or 5432}")
    cases = {
        direct: "new_jobs=LISTEN on the queue's URL",
        direct + "?listen_url=none": "new_jobs=polling (listen_url=none)",
        direct + "?listen_url=" + quote(direct, safe=""): "new_jobs=LISTEN via postgresql://",
    }
    for text, expected in cases.items():
        with portq.connect(text, prefix=PREFIX) as q, caplog.at_level(logging.INFO):
            caplog.clear()
            Worker(q, f"mh-{uuid.uuid4().hex[:8]}", lambda job: None, burst=True,
                   registry_interval=None, prune_interval=None).run()
            (line,) = [r.getMessage() for r in caplog.records
                       if r.getMessage().startswith("worker.started")]
            assert expected in line
            assert (url.password or "\0") not in line
            polling = "listen_url=none" in text
            assert (q.backend.listener(["x"]) is None) is polling
            assert q.backend.idle_max_default == (0.25 if polling else 2.0)


def test_server_identity_changes_are_reported_once_per_change() -> None:
    """The bookkeeping behind :meth:`watch_identity`, on SQLite with identities set by the
    test (SQLite has none of its own: ``server_identity()`` is None there)."""
    from portq.backends.sqlite import SqliteBackend

    class Shifting(SqliteBackend):
        identities = [ServerIdentity("1", 1), ServerIdentity("1", 1), ServerIdentity("1", 2)]

        def read_identity(self, conn: Any) -> ServerIdentity | None:
            return self.identities.pop(0)

    backend = Shifting(parse_url("sqlite:///:memory:"), prefix=PREFIX)
    seen: list[tuple[ServerIdentity, ServerIdentity]] = []
    backend.watch_identity(lambda old, new: seen.append((old, new)))
    for _ in range(3):
        backend.pool.release(backend.pool.acquire(), broken=True)
    assert seen == [(ServerIdentity("1", 1), ServerIdentity("1", 2))]
    assert backend.server_identity() == ServerIdentity("1", 2)
    plain = SqliteBackend(parse_url("sqlite:///:memory:"), prefix=PREFIX)
    plain.pool.release(plain.pool.acquire())
    assert plain.server_identity() is None


def test_mysql_has_no_server_identity() -> None:
    try:
        with portq.connect(MYSQL, prefix=PREFIX, pool_size=1) as q:
            q.migrate()
            assert q.backend.server_identity() is None
    except portq.DatabaseError as exc:
        pytest.skip(f"no MariaDB: {exc}")


# ---- MySQL/MariaDB: one address (a proxy) that goes away and comes back -------------------

def test_mysql_worker_through_a_proxy_survives_the_proxy_restarting() -> None:
    """What MySQL/MariaDB users run instead of a host list: one proxy or VIP address. The
    proxy is cut (every relayed connection closed, nothing listening) for 2 s mid-run and
    comes back on the same port: the worker logs connection errors, reconnects, and every
    job succeeds."""
    target = _migrated(MYSQL, "MariaDB")
    proxy = TcpProxy((target.host or "127.0.0.1", target.port or 3306)).start()
    via = MYSQL.replace(f"{target.host}:{target.port or 3306}", f"127.0.0.1:{proxy.port}")
    assert via != MYSQL
    qname = f"mh-{uuid.uuid4().hex[:8]}"
    ran: Counter[int] = Counter()
    lock = threading.Lock()

    def handler(job: Job) -> None:
        time.sleep(0.01)
        with lock:
            ran[job.id] += 1

    try:
        with portq.connect(MYSQL, prefix=PREFIX) as direct, \
                portq.connect(via, prefix=PREFIX) as q:
            ids = direct.enqueue_many([{"queue": qname, "payload": {"n": n}} for n in range(300)])
            worker = Worker(q, qname, handler, concurrency=2, lease=10, reap_interval=1.0,
                            registry_interval=None, prune_interval=None)
            thread = threading.Thread(target=worker.run, daemon=True)
            thread.start()
            assert wait_until(lambda: len(ran) >= 30, timeout=30)
            proxy.stop()
            cut_at = len(ran)
            time.sleep(2)
            stalled = len(ran)
            proxy.start()
            assert wait_until(lambda: counts(direct, qname)["succeeded"] == 300, timeout=60)
            worker.stop()
            thread.join(30)
        assert stalled < 300 and cut_at < 300  # the cut happened mid-run
        assert set(ran) == set(ids)
        assert proxy.accepted > 2  # connections were made again after the restart
    finally:
        proxy.stop()


# ---- through PgBouncer in transaction mode (.ci/pgbouncer.sh starts one) ----------------

def _pgbouncer() -> tuple[str, str]:
    """(URL through PgBouncer with listen_url=, the same without it)."""
    url = os.environ.get("PORTQ_TEST_PGBOUNCER_URL")
    if not url:
        why = "PORTQ_TEST_PGBOUNCER_URL not set (bash .ci/pgbouncer.sh start prints one)"
        if os.environ.get("PORTQ_REQUIRE_PGBOUNCER"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    base, _, query = url.partition("?")
    rest = "&".join(p for p in query.split("&") if p and not p.startswith("listen_url="))
    return url, base + (f"?{rest}" if rest else "")


def test_pgbouncer_is_detected_and_workers_poll_without_prepared_statements(
        caplog: pytest.LogCaptureFixture) -> None:
    _, pooled = _pgbouncer()
    qname = f"mh-{uuid.uuid4().hex[:8]}"
    with portq.connect(pooled, prefix=PREFIX) as q:
        q.migrate()
        assert q.backend.behind_pooler
        assert q.backend.listener([qname]) is None and q.backend.idle_max_default == 0.25
        ids = q.enqueue_many([{"queue": qname, "payload": n} for n in range(400)])
        ran: Counter[int] = Counter()
        lock = threading.Lock()

        def handler(job: Job) -> None:
            with lock:
                ran[job.id] += 1

        # three workers share PgBouncer's server connections: each statement runs well past
        # psycopg's prepare threshold (5) on connections that move between server processes
        workers = [Worker(q, qname, handler, concurrency=2, burst=True, registry_interval=None,
                          prune_interval=None) for _ in range(3)]
        with caplog.at_level(logging.INFO):
            threads = [threading.Thread(target=w.run) for w in workers]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        assert sorted(ran) == sorted(ids) and set(ran.values()) == {1}
        assert counts(q, qname)["succeeded"] == 400
    started = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith("worker.started")]
    assert len(started) == 3 and all("new_jobs=polling (a connection pooler" in line
                                     for line in started)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == []


def test_pgbouncer_with_listen_url_wakes_idle_workers_at_once() -> None:
    with_listen, _ = _pgbouncer()
    qname = f"mh-{uuid.uuid4().hex[:8]}"
    started: list[float] = []
    with portq.connect(with_listen, prefix=PREFIX) as q:
        q.migrate()
        assert q.backend.behind_pooler and q.backend.idle_max_default == 2.0
        direct = q.backend.listen_url
        assert direct is not None and direct is not q.backend.url
        with portq.connect(str(parse_url(with_listen).query["listen_url"]),
                           prefix=PREFIX) as d:
            assert not d.backend.behind_pooler  # the direct URL has no pooler in between
        worker = Worker(q, qname, lambda job: started.append(time.monotonic()),
                        registry_interval=None, prune_interval=None)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            latencies = []
            for n in range(3):
                time.sleep(3)  # idle: the worker's sleeps have grown to idle_max (2 s)
                at = time.monotonic()
                q.enqueue(qname, n)  # NOTIFY through PgBouncer, heard on the direct one
                assert wait_until(lambda n=n: len(started) > n, timeout=10)
                latencies.append(started[n] - at)
        finally:
            worker.stop()
            thread.join(30)
    assert max(latencies) < 1.0, latencies


def test_async_api_takes_a_host_list_and_says_how_it_finds_jobs(
        caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from portq import aio
    url = _pg()
    listed = _with_hosts(url, f"127.0.0.1:{_dead_port()},{url.host}:{url.port or 5432}",
                         "target_session_attrs=read-write&listen_url=none")
    qname = f"mh-{uuid.uuid4().hex[:8]}"
    done: list[int] = []

    async def handler(job: Job) -> None:
        done.append(job.id)

    async def main() -> int:
        q = await aio.connect(listed, prefix=PREFIX)
        try:
            job_id = await q.enqueue(qname, {"n": 1})
            await aio.AsyncWorker(q, qname, handler, burst=True, registry_interval=None,
                                  prune_interval=None).run()
            return job_id
        finally:
            await q.close()

    with caplog.at_level(logging.INFO):
        job_id = asyncio.run(main())
    assert done == [job_id]
    (line,) = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith("worker.started")]
    assert "new_jobs=polling (listen_url=none)" in line and "(asyncio)" in line


def test_pgbouncer_async_pool_never_prepares_statements(
        caplog: pytest.LogCaptureFixture) -> None:
    """portq.aio through PgBouncer: handlers outlive a 0.9 s lease, so
    renewals repeat far past psycopg's prepare threshold on client connections PgBouncer
    multiplexes; none is refused and nothing is lost."""
    import asyncio

    from portq import aio
    _, pooled = _pgbouncer()
    qname = f"mh-{uuid.uuid4().hex[:8]}"

    async def main() -> list[Any]:
        async with await aio.connect(pooled, prefix=PREFIX, pool_size=8) as q:

            async def handler(job: Job) -> None:
                for _ in range(6):  # reads beside the renewals, on other pooled connections
                    assert await q.job(job.id) is not None
                    await asyncio.sleep(0.25)

            await q.enqueue_many([{"queue": qname, "payload": n} for n in range(16)])
            return list(await asyncio.gather(*(
                aio.AsyncWorker(q, qname, handler, concurrency=4, lease=0.9, burst=True,
                                registry_interval=None, prune_interval=None).run()
                for _ in range(2))))

    with portq.connect(pooled, prefix=PREFIX) as q:
        q.migrate()
    with caplog.at_level(logging.WARNING):
        counters = asyncio.run(main())
    assert sum(c.succeeded for c in counters) == 16 and sum(c.lost for c in counters) == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
