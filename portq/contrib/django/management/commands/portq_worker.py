"""``manage.py portq_worker [--backend ALIAS] [--queue Q …] [--concurrency N]``: run the
Django tasks stored by a portq TASKS backend. SIGTERM/SIGINT stop claiming and let running
tasks finish (up to ``--grace`` seconds; the rest are given back to the queue)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from portq.contrib.django.backend import PortqBackend
from portq.contrib.django.management.commands._common import portq_backend
from portq.contrib.django.runner import TaskRunner
from portq.errors import ConfigurationError, PortqError, SchemaError
from portq.queue import Queue
from portq.worker import Worker, WorkerCounters


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run a portq worker for the django.tasks tasks of a portq TASKS backend."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="the TASKS alias of the portq backend (default: default)")
        parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                            help="a queue to serve (repeatable; default: the backend's QUEUES)")
        parser.add_argument("--concurrency", type=int, default=4,
                            help="tasks run at once, one thread each (default 4)")
        parser.add_argument("--lease", type=float, default=30.0,
                            help="seconds a claimed task is leased, renewed while it runs")
        parser.add_argument("--grace", type=float, default=30.0,
                            help="seconds running tasks get to finish after SIGTERM")
        parser.add_argument("--burst", action="store_true",
                            help="exit once no ready or running task is left")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = portq_backend(options["backend"])
        queues = options["queues"] or sorted(backend.queues)
        if not queues:
            raise CommandError("the backend's QUEUES is empty (any queue): name the queues "
                               "to serve with --queue", returncode=2)
        unknown = [q for q in queues if backend.queues and q not in backend.queues]
        if unknown:
            raise CommandError(f"queue {unknown[0]!r} is not in TASKS[{backend.alias!r}]"
                               f"['QUEUES'] {sorted(backend.queues)}", returncode=2)
        if connections[backend.database].in_atomic_block:
            raise CommandError(
                f"database {backend.database!r} has a transaction open here (a TestCase, or "
                "call_command inside transaction.atomic()): the worker could not see the "
                "tasks it enqueued, and on SQLite would wait for its lock; run the worker "
                "after the commit (in tests: TransactionTestCase)", returncode=2)
        if not logging.getLogger("portq").handlers and not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                                format="%(asctime)s %(levelname)s %(name)s %(message)s")
        with backend.serving() as queue:  # closed when done, whatever happens
            counters = self.serve(backend, queue, queues, options)
        self.stdout.write("portq worker stopped: " + " ".join(
            f"{k}={v}" for k, v in counters.as_dict().items()))

    def serve(self, backend: PortqBackend, queue: Queue, queues: list[str],
              options: dict[str, Any]) -> WorkerCounters:
        try:
            queue.backend.check_schema()
        except SchemaError as exc:
            raise CommandError(f"{exc} (from Django: manage.py portq_migrate --backend "
                               f"{backend.alias})") from None
        try:
            worker = Worker(queue, backend.portq_queues(queues), TaskRunner(backend),
                            concurrency=options["concurrency"], lease=options["lease"],
                            grace=options["grace"], burst=options["burst"],
                            install_signals=True)
        except ConfigurationError as exc:
            raise CommandError(str(exc), returncode=2) from None
        except PortqError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"portq worker {worker.worker_id} serving {', '.join(queues)} on "
                          f"{queue.url}")
        self.stdout.flush()
        return worker.run()
