"""The ``django.tasks`` backend: jobs in portq's table, written and read through Django's
connection.

A task becomes one portq job (:mod:`portq.contrib.django.results`): portq queue
``"<alias>:<queue_name>"`` (each TASKS alias has its own jobs, and its worker serves only
them), priority = the task's (Django's -100..100, larger first, is portq's order as is),
``run_at`` = ``run_after``. ``enqueue()`` and ``get_result()`` run on Django's connection of
the ``database`` alias: inside ``transaction.atomic()`` the job is part of that transaction
(it commits or rolls back with the request's writes) and ``get_result()`` sees it before
the commit. Only the worker, ``portq_migrate`` and the system check open portq's own
connections (a :class:`~portq.Queue` on the same database, from Django's settings or
OPTIONS ``url``), and close them when done; a finished request closes them too.

A worker (``manage.py portq_worker``) runs each job with
:class:`~portq.contrib.django.runner.TaskRunner`. Failures follow portq's retries (OPTIONS
``max_attempts``, ``backoff``): between attempts a result reads ``READY``; each failed
attempt is one ``TaskError``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import request_finished
from django.db import connections
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json

from portq.backends import backend_for
from portq.engines import DJANGO_VENDORS
from portq.errors import ConfigurationError, PortqError, SchemaError
from portq.queue import INT32, Queue
from portq.url import DatabaseURL, host_items, parse_url

from .results import is_task_payload, payload_of, portq_queue, result_of, shown

#: Django's ``connection.vendor`` -> portq URL scheme (MariaDB's vendor is "mysql")
VENDOR_SCHEMES = DJANGO_VENDORS
QUEUE_OPTIONS = {"max_attempts", "backoff", "max_payload_bytes", "max_result_bytes"}
OPTIONS = {"database", "url", "prefix", "pool_size"} | QUEUE_OPTIONS


def database_url(alias: str) -> DatabaseURL:
    """The portq URL of Django's database ``alias`` (from ``settings.DATABASES``)."""
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(f"portq: OPTIONS database {alias!r} is not in DATABASES")
    conn = connections[alias]
    return url_for(conn.vendor, conn.settings_dict, alias)


#: OPTIONS Django's PostgreSQL backend keeps to itself or gives psycopg rather than libpq
#: (``get_connection_params``): every other one is a libpq parameter it passes on
DJANGO_PG_OWN = frozenset({"assume_role", "isolation_level", "pool", "server_side_binding",
                           "cursor_factory", "context", "prepare_threshold", "autocommit",
                           "row_factory"})
#: MySQLdb's connection arguments that PyMySQL takes under the same name (Django's MySQL
#: backend passes OPTIONS to MySQLdb.connect); ``ssl`` is a dict of ca, cert and key
MYSQL_SAME = ("charset", "connect_timeout", "read_timeout", "write_timeout", "unix_socket")


def driver_options(scheme: str, given: dict[str, Any]) -> dict[str, str]:
    """The URL options of a Django database's ``OPTIONS`` that its own connections pass to
    the driver, so that portq's connections reach the same server the same way (sslmode,
    a search_path in ``options``, a service, ...): PostgreSQL's libpq parameters, the
    MySQL arguments PyMySQL shares with MySQLdb. Others are Django's own, or the
    driver's Python objects, which no URL holds."""
    scalar = (str, int, float)
    if scheme == "postgresql":
        return {k: str(v) for k, v in given.items()
                if k not in DJANGO_PG_OWN and isinstance(v, scalar) and not isinstance(v, bool)}
    if scheme != "mysql":
        return {}
    found = {k: str(given[k]) for k in MYSQL_SAME if isinstance(given.get(k), scalar)}
    ssl = given.get("ssl")
    if isinstance(ssl, dict):
        found.update({f"ssl_{k}": str(ssl[k]) for k in ("ca", "cert", "key") if ssl.get(k)})
    return found


def url_for(vendor: str, db: dict[str, Any], alias: str = "default") -> DatabaseURL:
    """The portq URL of a Django database of ``vendor`` with settings ``db``."""
    scheme = VENDOR_SCHEMES.get(vendor)
    if scheme is None:
        raise ImproperlyConfigured(
            f"portq: Django database {alias!r} is {vendor!r}; portq supports "
            f"{', '.join(sorted(VENDOR_SCHEMES))} (or give OPTIONS url)")
    if scheme == "sqlite":
        return DatabaseURL(engine="sqlite", scheme="sqlite", database=str(db["NAME"]))
    # HOST "h1,h2" with PORT "5432,5433" (or one port for all) is libpq's host list,
    # which Django hands to psycopg as it is; portq's URL parser checks it the same way.
    # An empty HOST is what Django gives the driver: no host (libpq: its Unix socket;
    # PyMySQL: localhost); one starting with "/" is a Unix socket (MySQL: unix_socket)
    host_text, port_text = str(db.get("HOST") or ""), str(db.get("PORT") or "")
    options = driver_options(scheme, db.get("OPTIONS") or {})
    if scheme == "mysql" and host_text.startswith("/"):
        options, host_text = {**options, "unix_socket": host_text}, "localhost"
    elif scheme != "postgresql" and not host_text:
        host_text = "localhost"
    try:
        netloc = ",".join(host_items(host_text, port_text, f"portq: Django database {alias!r}"))
    except ConfigurationError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    # engine, scheme, the host list and its options, validated by portq
    url = parse_url(f"{scheme}://{netloc if host_text else ''}/"
                    + ("?" + urlencode(options) if options else ""))
    return DatabaseURL(engine=url.engine, scheme=scheme, host=url.host, port=url.port,
                       username=db.get("USER") or None, password=db.get("PASSWORD") or None,
                       database=str(db["NAME"]) if db.get("NAME") else None,
                       query=url.query, hosts=url.hosts)


class PortqBackend(BaseTaskBackend):  # type: ignore[misc]
    """``django.tasks`` backend storing tasks as portq jobs (see the module docstring)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - OPTIONS
        if unknown:
            raise ImproperlyConfigured(f"portq: unknown TASKS[{alias!r}] OPTIONS "
                                       f"{sorted(unknown)}; known: {', '.join(sorted(OPTIONS))}")
        if re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", alias) is None:
            raise ImproperlyConfigured(
                f"portq: TASKS alias {alias!r} names its portq queues ('<alias>:<queue>'): "
                "use 1 to 60 of A-Z a-z 0-9 _ . -")
        self.database: str = self.options.get("database", "default")
        self._queue: Queue | None = None
        self._opened_for: DatabaseURL | None = None
        self._serving = 0  # workers of this process using the pool (request_finished waits)
        self._lock = threading.Lock()
        request_finished.connect(self._request_finished, weak=True)

    def __repr__(self) -> str:
        return f"TASKS[{self.alias!r}] (portq.contrib.django.PortqBackend)"

    # ---- portq's own connections (worker, migrations, checks) ---------------------------

    @property
    def queue(self) -> Queue:
        """portq's :class:`~portq.Queue` on this backend's database, opened on first use
        and opened again when Django's settings of that database changed (a test run's
        test database)."""
        url = self.options.get("url")
        target = parse_url(url) if url else database_url(self.database)
        with self._lock:
            if self._queue is not None and self._opened_for != target:
                self._queue.close()
                self._queue = None
            if self._queue is None:
                backend = backend_for(target, prefix=self.options.get("prefix", "portq_"),
                                      pool_size=self.options.get("pool_size", 4))
                self._queue = Queue(backend, **{k: v for k, v in self.options.items()
                                                if k in QUEUE_OPTIONS})
                self._opened_for = target
            return self._queue

    @property
    def queue_url(self) -> str:
        """The portq database URL, without its password."""
        return self.queue.url

    def portq_queues(self, queue_names: list[str]) -> list[str]:
        """The portq queues of this alias's Django queues (what its worker serves)."""
        return [portq_queue(self.alias, name) for name in queue_names]

    def close(self) -> None:
        """Close portq's own connections (Django's are Django's)."""
        with self._lock:
            if self._queue is not None:
                self._queue.close()
                self._queue = None

    @contextmanager
    def serving(self) -> Iterator[Queue]:
        """The queue, held open for a worker of this process (a finished request does not
        close it meanwhile); closed when the last such worker is done."""
        queue = self.queue
        with self._lock:
            self._serving += 1
        try:
            yield queue
        finally:
            with self._lock:
                self._serving -= 1
                last = self._serving == 0
            if last:
                self.close()

    def _request_finished(self, **kwargs: Any) -> None:
        with self._lock:
            serving = self._serving
        if not serving:
            self.close()

    # ---- enqueue ------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):  # USE_TZ = False: local time
            run_at = timezone.make_aware(run_at)
        raw = self._django_connection()
        job_id = self.queue.enqueue(portq_queue(self.alias, task.queue_name),
                                    payload_of(task, args, kwargs), priority=task.priority,
                                    run_at=run_at, conn=raw)
        record = self.queue.job(job_id, conn=raw)
        result = TaskResult(
            task=task, id=str(job_id), status=TaskResultStatus.READY,
            enqueued_at=shown(record.created_at if record else None), started_at=None,
            last_attempted_at=None, finished_at=None, args=args, kwargs=kwargs,
            backend=self.alias, errors=[], worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def _django_connection(self) -> Any:
        """The DB-API connection under Django's connection of ``database``."""
        django_conn = connections[self.database]
        django_conn.ensure_connection()
        return django_conn.connection

    # ---- results ------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result, read on Django's connection (inside an open transaction it
        sees the tasks that transaction enqueued)."""
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(f"{result_id!r} is not a portq job id") from None
        if not 0 < job_id <= INT32:
            raise TaskResultDoesNotExist(f"no Django task has id {result_id!r}")
        raw = self._django_connection()
        record = self.queue.job(job_id, conn=raw)
        if record is None or not is_task_payload(record.payload) or \
                not record.queue.startswith(portq_queue(self.alias, "")):
            raise TaskResultDoesNotExist(
                f"no Django task of TASKS[{self.alias!r}] has id {result_id!r}")
        history = self.queue.error_history(job_id, conn=raw) if record.attempts else []
        stored = self.queue.result(job_id, conn=raw) if record.state == "succeeded" else None
        return result_of(record, self.alias, history, stored)

    # ---- system checks ------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """A warning when portq's tables are missing or older than this portq (``manage.py
        check``; a warning, so that ``manage.py migrate`` still runs)."""
        try:
            self.queue.backend.check_schema()
        except SchemaError as exc:
            return [checks.Warning(
                str(exc),
                hint=f"run manage.py portq_migrate --backend {self.alias}", obj=self,
                id="portq.W001")]
        except (PortqError, ImproperlyConfigured) as exc:
            return [checks.Warning(f"cannot check portq's tables: {exc}", obj=self,
                                   id="portq.W002")]
        finally:
            self.close()
        return []
