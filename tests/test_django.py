"""portq.contrib.django: the example shop (examples/django/) on SQLite, PostgreSQL and
MariaDB, with the real management commands as subprocesses.

Django 6 needs Python >= 3.12: on an older Python these tests skip with that reason (run
them in a 3.12 venv: ``pip install -e '.[all,test,django]'``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REQUIRED = bool(os.environ.get("PORTQ_REQUIRE_DJANGO"))  # .ci/run: a skip is a failure


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"PORTQ_REQUIRE_DJANGO is set but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


if sys.version_info < (3, 12):
    _unavailable("Django 6 (django.tasks) needs Python >= 3.12; this is "
                 f"{sys.version.split()[0]}: run tests/test_django.py in a 3.12 venv")
try:
    import django.tasks
except ImportError:
    _unavailable("Django 6 is not installed: pip install 'portq[django]' (Python >= 3.12)")

from portq.conformance.helpers import wait_until  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "django"
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_DEFAULT = "mysql://root@127.0.0.1:3306/test"
SQLITE_FILE = os.path.join(tempfile.mkdtemp(prefix="portq-django-"), "shop.sqlite3")


def _environ() -> dict[str, str]:
    env = dict(os.environ, PORTQ_DJANGO_SQLITE=SQLITE_FILE,
               DJANGO_SETTINGS_MODULE="shopsite.settings")
    env.setdefault("PORTQ_TEST_PG_URL", PG_DEFAULT)
    env.setdefault("PORTQ_TEST_MYSQL_URL", MYSQL_DEFAULT)
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLE), env.get("PYTHONPATH", "")])
    return env


os.environ.update({k: v for k, v in _environ().items() if k != "PYTHONPATH"})
sys.path.insert(0, str(EXAMPLE))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.tasks import TaskResultStatus, task_backends  # noqa: E402
from shop import tasks  # noqa: E402
from shop.models import Order  # noqa: E402

import portq  # noqa: E402
from portq.backends import backend_for  # noqa: E402
from portq.contrib.django import PortqBackend  # noqa: E402

ALIASES = {"sqlite": "default", "postgres": "pg", "mysql": "mysql"}
_ready: set[str] = set()


@pytest.fixture(params=sorted(ALIASES))
def alias(request: pytest.FixtureRequest) -> str:
    """The Django database (and TASKS) alias of one engine, migrated; skipped when that
    server is unreachable, naming it."""
    name = ALIASES[request.param]
    if name not in _ready:
        try:
            connections[name].ensure_connection()
        except Exception as exc:  # noqa: BLE001 - any driver's "cannot connect"
            reason = (f"{request.param} not reachable for the Django tests: "
                      f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            if REQUIRED or request.param in os.environ.get("PORTQ_REQUIRE_ENGINES", ""):
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)
        call_command("migrate", database=name, verbosity=0)
        _run("portq_migrate", "--backend", name)
        _ready.add(name)
    return name


def _backend(alias: str) -> PortqBackend:
    backend = task_backends[alias]
    assert isinstance(backend, PortqBackend)
    return backend


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLE / "manage.py"), *args],
                          capture_output=True, text=True, timeout=timeout, env=_environ(),
                          cwd=EXAMPLE)


class Boom(Exception):
    pass


def test_enqueue_in_a_rolled_back_atomic_block_leaves_no_job(alias: str) -> None:
    customer = f"rollback-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Boom), transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(customer=customer, total_cents=5)
        result = tasks.charge.using(backend=alias).enqueue(order.id, alias)
        assert _backend(alias).queue.job(int(result.id)) is None, "visible before commit"
        raise Boom
    assert not Order.objects.using(alias).filter(customer=customer).exists()
    assert _backend(alias).queue.job(int(result.id)) is None, "the rolled-back job exists"
    with pytest.raises(Exception, match="no Django task"):
        tasks.charge.using(backend=alias).get_result(result.id)


def test_enqueue_maps_priority_queue_and_run_after(alias: str) -> None:
    from datetime import UTC, datetime, timedelta
    backend = _backend(alias)
    later = datetime.now(UTC) + timedelta(hours=1)
    with transaction.atomic(using=alias):
        low = tasks.add.using(backend=alias, priority=-100).enqueue(1, 1)
        high = tasks.add.using(backend=alias, priority=100).enqueue(2, 2)
        deferred = tasks.add.using(backend=alias, run_after=later).enqueue(3, 3)
    records = [backend.queue.job(int(r.id)) for r in (low, high, deferred)]
    assert all(rec is not None and rec.queue == f"{alias}:emails" for rec in records)
    assert [rec.priority for rec in records if rec] == [-100, 100, 50]
    run_at = records[2].run_at if records[2] else None
    assert run_at is not None and abs((run_at - later).total_seconds()) < 1
    result = tasks.add.using(backend=alias).get_result(deferred.id)
    assert result.status == TaskResultStatus.READY and result.args == [3, 3]
    assert result.task.priority == 50 and result.task.queue_name == "emails"
    for r in (low, high, deferred):
        assert backend.queue.cancel(int(r.id))


@pytest.fixture
def worker(alias: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE / "manage.py"), "portq_worker", "--backend", alias,
         "--queue", "default", "--queue", "emails", "--concurrency", "4", "--lease", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environ(),
        cwd=EXAMPLE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def _result(alias: str, result_id: str) -> Any:
    return _backend(alias).get_result(result_id)


def _finished(alias: str, result_id: str, timeout: float = 60) -> Any:
    assert wait_until(lambda: _result(alias, result_id).is_finished, timeout=timeout,
                      interval=0.1), f"task {result_id} did not finish"
    return _result(alias, result_id)


def test_worker_command_runs_committed_tasks_and_drains_on_sigterm(
        alias: str, worker: subprocess.Popen[str]) -> None:
    with transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(customer="ada", total_cents=1999)
        charged = tasks.charge.using(backend=alias).enqueue(order.id, alias)
        summed = tasks.add.using(backend=alias).enqueue(20, 22)
        failed = tasks.explode.using(backend=alias).enqueue("card declined")
        context = tasks.attempt_number.using(backend=alias).enqueue()
        awaited = tasks.add_later.using(backend=alias).enqueue(40, 2)
    job_id = _backend(alias).queue.enqueue(f"{alias}:default", {"task": "os.system",
                                                       "args": ["true"], "kwargs": {}})

    result = _finished(alias, charged.id)
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"order": order.id, "charged_cents": 1999}
    assert Order.objects.using(alias).get(id=order.id).paid, "the task's ORM write is lost"
    assert result.attempts == 1 and len(result.worker_ids[0]) > 0
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert tasks.charge.using(backend=alias).get_result(charged.id).id == charged.id
    assert _finished(alias, summed.id).return_value == 42
    assert _finished(alias, context.id).return_value == 1
    assert _finished(alias, awaited.id).return_value == 42  # an async def task

    result = _finished(alias, failed.id)  # 2 attempts (settings: portq retries)
    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    assert "card declined" in result.errors[-1].traceback
    assert result.errors[0].exception_class is ValueError

    bad = _backend(alias).queue.job(job_id)
    assert wait_until(lambda: (_backend(alias).queue.job(job_id) or bad).state == "dead")
    assert "is not a django.tasks Task" in (_backend(alias).queue.job(job_id).last_error
                                            or "")

    napping = tasks.nap.using(backend=alias).enqueue(1.5)
    assert wait_until(lambda: _result(alias, napping.id).status == TaskResultStatus.RUNNING,
                      timeout=30, interval=0.05)
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "portq worker stopped" in out
    result = _result(alias, napping.id)
    assert result.status == TaskResultStatus.SUCCESSFUL, "SIGTERM did not let the task finish"
    assert result.return_value == "slept 1.5"


def test_management_commands_refuse_bad_arguments_clearly(alias: str) -> None:
    proc = _run("portq_worker", "--backend", "nope")
    assert proc.returncode == 2 and "no TASKS backend 'nope'" in proc.stderr
    proc = _run("portq_worker", "--backend", alias, "--queue", "elsewhere")
    assert proc.returncode == 2 and "'elsewhere' is not in TASKS" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_async_enqueue_and_get_result(alias: str) -> None:
    import asyncio

    from asgiref.sync import sync_to_async

    async def go() -> tuple[Any, Any]:
        result = await tasks.add.using(backend=alias).aenqueue(1, 2)
        fetched = await tasks.add.using(backend=alias).aget_result(result.id)
        await sync_to_async(_backend(alias).queue.cancel)(int(result.id))
        return result, fetched
    result, fetched = asyncio.run(go())
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY
    assert fetched.args == [1, 2]


@pytest.mark.parametrize("vendor,engine", [
    ("postgresql", "postgres"), ("mysql", "mysql"), ("sqlite", "sqlite"),
    ("oracle", "oracle"), ("microsoft", "sqlserver")])
def test_django_vendors_map_to_portq_engines(vendor: str, engine: str) -> None:
    """Oracle and SQL Server (mssql-django) are mapped, parse-checked only: no server here."""
    from portq.contrib.django.backend import url_for
    db = {"NAME": "shop", "USER": "app", "PASSWORD": "p@ss:w/rd", "HOST": "db", "PORT": "1"}
    url = url_for(vendor, db)
    assert url.engine == engine and url.database == "shop"
    assert "p@ss" not in url.redacted() and "p@ss" not in repr(url)
    if engine != "sqlite":
        assert (url.host, url.port, url.username, url.password) == ("db", 1, "app", "p@ss:w/rd")
    with pytest.raises(Exception, match="portq supports"):
        url_for("cockroach", db)


def test_django_sockets_and_an_empty_host_reach_what_django_reaches() -> None:
    """portq's connections go where Django's own do: an empty HOST gives PostgreSQL no host
    (libpq's Unix socket; Django passes none) and MySQL localhost; a HOST starting with "/"
    is a Unix socket (PostgreSQL: the socket directory as libpq's host; MySQL: PyMySQL's
    unix_socket, as Django's MySQL backend passes it)."""
    from portq.backends.postgres import libpq_kwargs
    from portq.contrib.django.backend import url_for
    db = {"NAME": "shop", "USER": "app", "PASSWORD": "s3cret", "OPTIONS": {}}
    empty = url_for("postgresql", {**db, "HOST": "", "PORT": ""})
    assert empty.hosts == () and "host" not in libpq_kwargs(empty)
    assert empty.redacted() == "postgresql://app:***@/shop"
    socket = url_for("postgresql", {**db, "HOST": "/var/run/postgresql", "PORT": "5433"})
    assert socket.hosts == (("/var/run/postgresql", 5433),)
    assert (libpq_kwargs(socket)["host"], libpq_kwargs(socket)["port"]) == (
        "/var/run/postgresql", "5433")
    mysql = url_for("mysql", {**db, "HOST": "/run/mysqld/mysqld.sock", "PORT": ""})
    assert (mysql.host, mysql.query) == ("localhost", {"unix_socket": "/run/mysqld/mysqld.sock"})
    assert url_for("mysql", {**db, "HOST": "", "PORT": ""}).hosts == (("localhost", None),)
    for url in (empty, socket, mysql):
        assert "s3cret" not in url.redacted() and "s3cret" not in repr(url)


def test_django_options_reach_portqs_connections_as_django_passes_them() -> None:
    """OPTIONS that Django's PostgreSQL backend passes to libpq (sslmode, a search_path in
    ``options``, ...) go with portq's own connections too, so its worker and migrations
    use the schema the application's transactions write jobs to; Django's own keys and
    psycopg's Python objects stay out. MySQL: the arguments PyMySQL shares with MySQLdb,
    ``ssl`` as its ca/cert/key."""
    from psycopg import ClientCursor

    from portq.backends.postgres import libpq_kwargs
    from portq.contrib.django.backend import url_for
    schema = f"dj_{uuid.uuid4().hex[:8]}"
    parts = portq.url.parse_url(os.environ["PORTQ_TEST_PG_URL"])
    db = {"NAME": parts.database, "USER": parts.username or "", "PASSWORD": parts.password or "",
          "HOST": parts.host or "", "PORT": str(parts.port or ""),
          "OPTIONS": {"options": f"-c search_path={schema}", "sslmode": "disable",
                      "isolation_level": 1, "server_side_binding": True, "assume_role": "x",
                      "pool": {"min_size": 2}, "cursor_factory": ClientCursor}}
    url = url_for("postgresql", db)
    assert url.query == {"options": f"-c search_path={schema}", "sslmode": "disable"}
    assert libpq_kwargs(url)["options"] == f"-c search_path={schema}"
    with portq.connect(os.environ["PORTQ_TEST_PG_URL"]) as admin:
        admin.backend.run("schema", lambda cur: cur.execute(f"CREATE SCHEMA {schema}"))
        try:
            with portq.Queue(backend_for(url, prefix="djopt_")) as q:
                q.migrate()
                found = admin.backend.run("tables", lambda cur: cur.execute(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename "
                    "LIKE 'djopt\\_%%'", (schema,)).fetchone()[0])
                assert found >= 8
        finally:
            admin.backend.run("drop", lambda cur: cur.execute(f"DROP SCHEMA {schema} CASCADE"))
    mysql = url_for("mysql", {"NAME": "shop", "USER": "app", "PASSWORD": "", "HOST": "db",
                              "PORT": "", "OPTIONS": {
                                  "charset": "utf8mb4", "init_command": "SET x=1",
                                  "ssl": {"ca": "/etc/ca.pem", "cert": "/etc/c.pem"},
                                  "isolation_level": "read committed"}})
    assert mysql.query == {"charset": "utf8mb4", "ssl_ca": "/etc/ca.pem",
                           "ssl_cert": "/etc/c.pem"}


def test_django_host_lists_become_libpq_host_lists() -> None:
    """Django hands HOST "h1,h2" / PORT "p1,p2" to psycopg as libpq's host list: portq's URL
    for it lists the same hosts, keeps target_session_attrs, and never shows the password."""
    from django.core.exceptions import ImproperlyConfigured

    from portq.backends.postgres import libpq_kwargs
    from portq.contrib.django.backend import url_for
    db = {"NAME": "shop", "USER": "app", "PASSWORD": "s3cret", "HOST": "db1,db2",
          "PORT": "5432,5433", "OPTIONS": {"target_session_attrs": "read-write"}}
    url = url_for("postgresql", db)
    assert url.hosts == (("db1", 5432), ("db2", 5433))
    assert libpq_kwargs(url)["host"] == "db1,db2" and libpq_kwargs(url)["port"] == "5432,5433"
    assert url.query == {"target_session_attrs": "read-write"}
    assert url.redacted() == ("postgresql://app:***@db1:5432,db2:5433/shop"
                              "?target_session_attrs=read-write")
    assert url_for("postgresql", {**db, "PORT": "6432"}).hosts == (("db1", 6432),
                                                                   ("db2", 6432))
    with pytest.raises(ImproperlyConfigured, match="lists 2 hosts but 3 ports"):
        url_for("postgresql", {**db, "PORT": "1,2,3"})
    with pytest.raises(Exception, match="a proxy or a virtual IP"):
        url_for("mysql", {**db, "OPTIONS": {}})
