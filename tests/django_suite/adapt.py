"""Django's own ``tests/tasks/`` suite, run against portq's ``PortqBackend``.

    python tests/django_suite/adapt.py ENGINE DJANGO_TESTS_TASKS_DIR

ENGINE is sqlite, postgres or mysql (PORTQ_TEST_PG_URL / PORTQ_TEST_MYSQL_URL name the
server's database; Django's test runner creates and drops ``test_<name>`` beside it).
``.ci/run`` downloads the sdist of the installed Django each time and passes its
``tests/tasks`` directory; none of Django's files are kept in this repository.

This file is every adaptation, applied as exact text replacements (each must match as many
times as listed, so a changed Django test fails here instead of being adapted blindly):

- the backend: ``DummyBackend`` / ``ImmediateBackend`` become ``PortqBackend`` in TASKS
  settings and in ``isinstance`` checks, with OPTIONS ``{"max_attempts": 1}`` (Django's
  backends never retry), so the ``options`` assertions expect those OPTIONS;
- a database test case: ``SimpleTestCase`` becomes :class:`DatabaseTestCase`, a
  ``TransactionTestCase`` whose tasks are committed for the worker to see, starting each
  test with no job (as the dummy backend's ``clear()`` does);
- the worker in burst mode: where a test expects a task to have run (the immediate
  backend's tests), ``run(result)`` runs ``manage.py portq_worker --burst`` in this process
  and refreshes the result before the assertions; the dummy backend's ``results`` /
  ``clear()`` (its in-memory list) read and delete this backend's jobs;
- tests that cannot apply to a database backend are skipped with the reason in
  :data:`INAPPLICABLE` (also listed in docs/operations.md, "Django").

No assertion is removed or changed other than the ``options`` value named above.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

OPTIONS: dict[str, Any] = {"max_attempts": 1}
PORTQ = "portq.contrib.django.PortqBackend"

#: test id -> why it cannot apply to a database backend
INAPPLICABLE = {
    "test_immediate_backend.ImmediateBackendTestCase.test_throws_keyboard_interrupt":
        "the immediate backend lets KeyboardInterrupt end the enqueuing process; portq's "
        "worker records it as the task's failure (FAILED with builtins.KeyboardInterrupt)",
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_get_result":
        "asserts NotImplementedError: portq supports get_result",
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_refresh_result":
        "asserts NotImplementedError: portq supports refresh",
    "test_immediate_backend.ImmediateBackendTestCase.test_cannot_pass_run_after":
        "asserts InvalidTask for run_after: portq supports run_after",
    "test_immediate_backend.ImmediateBackendTransactionTestCase."
    "test_doesnt_wait_until_transaction_commit_by_default":
        "expects the task to have run inside the open transaction; portq's enqueue is "
        "part of that transaction, so no worker can run it before the commit",
    "test_dummy_backend.DummyBackendTestCase.test_get_missing_result":
        "calls the synchronous get_result() inside an async test: Django refuses database "
        "queries from an event loop (SynchronousOnlyOperation) for every database backend",
    "test_tasks.TaskTestCase.test_get_missing_result":
        "calls the synchronous get_result() inside an async test (SynchronousOnlyOperation)",
    "test_tasks.TaskTestCase.test_refresh_result":
        "calls the synchronous refresh() inside an async test (SynchronousOnlyOperation)",
}

_TASKS_DUMMY = '"BACKEND": "django.tasks.backends.dummy.DummyBackend",'
_TASKS_IMMEDIATE = '"BACKEND": "django.tasks.backends.immediate.ImmediateBackend",'
_TASKS_PORTQ = f'"BACKEND": "{PORTQ}", "OPTIONS": adapt.OPTIONS,'
_IMPORT = "from portq.contrib.django import PortqBackend\n\nimport adapt\n"


def _run_after(call: str, indent: str, name: str = "result") -> tuple[str, str]:
    return (f"{indent}{name} = {call}\n", f"{indent}{name} = adapt.run({call})\n")


def _arun_after(call: str, indent: str) -> tuple[str, str]:
    return (f"{indent}result = await {call}\n",
            f"{indent}result = await adapt.arun(await {call})\n")


#: file -> [(old, new, times)]
REWRITES: dict[str, list[tuple[str, str, int]]] = {
    "test_immediate_backend.py": [
        ("from django.tasks.backends.immediate import ImmediateBackend\n", _IMPORT, 1),
        (_TASKS_IMMEDIATE, _TASKS_PORTQ, 4),
        ('assertIsInstance(task_backends["default"], ImmediateBackend)',
         'assertIsInstance(task_backends["default"], PortqBackend)', 1),
        ("self.assertEqual(default_task_backend.options, {})",
         "self.assertEqual(default_task_backend.options, adapt.OPTIONS)", 1),
        ("class ImmediateBackendTestCase(SimpleTestCase):",
         "class ImmediateBackendTestCase(adapt.DatabaseTestCase):", 1),
        ("class ImmediateBackendTransactionTestCase(TransactionTestCase):",
         "class ImmediateBackendTransactionTestCase(adapt.DatabaseTestCase):", 1),
        (*_run_after("task.enqueue(1, two=3)", " " * 16), 1),
        (*_arun_after("task.aenqueue()", " " * 16), 1),
        (*_run_after("task.enqueue()", " " * 16), 1),
        (*_run_after("test_tasks.complex_exception.enqueue()", " " * 12), 1),
        (*_run_after("test_tasks.complex_return_value.enqueue()", " " * 12), 1),
        ("        result = default_task_backend.enqueue(\n"
         "            test_tasks.calculate_meaning_of_life, [], {}\n        )\n",
         "        result = adapt.run(default_task_backend.enqueue(\n"
         "            test_tasks.calculate_meaning_of_life, [], {}\n        ))\n", 1),
        ("        result = await default_task_backend.aenqueue(\n"
         "            test_tasks.calculate_meaning_of_life, [], {}\n        )\n",
         "        result = await adapt.arun(await default_task_backend.aenqueue(\n"
         "            test_tasks.calculate_meaning_of_life, [], {}\n        ))\n", 1),
        (*_run_after("test_tasks.noop_task.enqueue()", " " * 12), 3),
        (*_run_after("test_tasks.failing_task_value_error.enqueue()", " " * 12), 1),
        (*_run_after("test_tasks.get_task_id.enqueue()", " " * 8), 1),
        (*_run_after("test_tasks.test_context.enqueue(1)", " " * 8), 1),
    ],
    "test_dummy_backend.py": [
        ("from django.tasks.backends.dummy import DummyBackend\n", _IMPORT, 1),
        (_TASKS_DUMMY, _TASKS_PORTQ, 4),
        ('assertIsInstance(task_backends["default"], DummyBackend)',
         'assertIsInstance(task_backends["default"], PortqBackend)', 1),
        ("self.assertEqual(default_task_backend.options, {})",
         "self.assertEqual(default_task_backend.options, adapt.OPTIONS)", 1),
        ("class DummyBackendTestCase(SimpleTestCase):",
         "class DummyBackendTestCase(adapt.DatabaseTestCase):", 1),
        ("class DummyBackendTransactionTestCase(TransactionTestCase):",
         "class DummyBackendTransactionTestCase(adapt.DatabaseTestCase):", 1),
        ("default_task_backend.clear()", "adapt.clear(default_task_backend)", 2),
        ("                self.assertIn(result, default_task_backend.results)\n\n"
         "    async def", "                self.assertIn(result, adapt.results("
         "default_task_backend))\n\n    async def", 1),
        ("                self.assertIn(result, default_task_backend.results)\n\n"
         "    def test_get_result", "                self.assertIn(result, await "
         "adapt.aresults(default_task_backend))\n\n    def test_get_result", 1),
        ("        enqueued_result = default_task_backend.results[0]\n"
         "        object.__setattr__(enqueued_result, \"status\", "
         "TaskResultStatus.SUCCESSFUL)\n\n        self.assertEqual(result.status, "
         "TaskResultStatus.READY)\n        result.refresh()",
         "        enqueued_result = adapt.results(default_task_backend)[0]\n"
         "        adapt.run(enqueued_result)\n\n        self.assertEqual(result.status, "
         "TaskResultStatus.READY)\n        result.refresh()", 1),
        ("        enqueued_result = default_task_backend.results[0]\n"
         "        object.__setattr__(enqueued_result, \"status\", "
         "TaskResultStatus.SUCCESSFUL)\n\n        self.assertEqual(result.status, "
         "TaskResultStatus.READY)\n        await result.arefresh()",
         "        enqueued_result = (await adapt.aresults(default_task_backend))[0]\n"
         "        await adapt.arun(enqueued_result)\n\n        self.assertEqual("
         "result.status, TaskResultStatus.READY)\n        await result.arefresh()", 1),
        ("len(default_task_backend.results)", "len(adapt.results(default_task_backend))", 2),
    ],
    "test_tasks.py": [
        ("from django.tasks.backends.dummy import DummyBackend\n"
         "from django.tasks.backends.immediate import ImmediateBackend\n", _IMPORT, 1),
        (_TASKS_DUMMY, _TASKS_PORTQ, 1),
        (_TASKS_IMMEDIATE, _TASKS_PORTQ, 1),
        ("DummyBackend)", "PortqBackend)", 2),
        ("ImmediateBackend)", "PortqBackend)", 1),
        ("class TaskTestCase(SimpleTestCase):", "class TaskTestCase(adapt.DatabaseTestCase):",
         1),
        ("default_task_backend.clear()", "adapt.clear(default_task_backend)", 1),
        ("        self.assertEqual(default_task_backend.results, [result])\n\n"
         "    async def test_enqueue_task_async",
         "        self.assertEqual(adapt.results(default_task_backend), [result])\n\n"
         "    async def test_enqueue_task_async", 1),
        ("        self.assertEqual(default_task_backend.results, [result])\n\n"
         "    def test_enqueue_with_invalid_argument",
         "        self.assertEqual(await adapt.aresults(default_task_backend), [result])\n\n"
         "    def test_enqueue_with_invalid_argument", 1),
        ("            immediate_task = test_tasks.failing_task_value_error.using(\n"
         "                backend=\"immediate\"\n            ).enqueue()\n",
         "            immediate_task = adapt.run(test_tasks.failing_task_value_error.using(\n"
         "                backend=\"immediate\"\n            ).enqueue())\n", 2),
    ],
    "test_custom_backend.py": [],  # custom backends of its own: runs unchanged
}


def rewrite(source_dir: Path, package: Path) -> None:
    """Copy Django's ``tests/tasks`` into ``package`` with :data:`REWRITES` applied and
    :data:`INAPPLICABLE` tests marked skipped."""
    package.mkdir(parents=True)
    for name in ("__init__.py", "tasks.py", *REWRITES):
        text = (source_dir / name).read_text()
        for old, new, times in REWRITES.get(name, []):
            found = text.count(old)
            if found != times:
                raise SystemExit(f"{name}: expected {times} of {old!r}, found {found}: "
                                 "Django's test changed, review tests/django_suite/adapt.py")
            text = text.replace(old, new)
        for test_id in INAPPLICABLE:
            module, *_, method = test_id.split(".")
            if f"{module}.py" == name:
                old = f"    def {method}(self):"
                old = old if old in text else f"    async def {method}(self):"
                if text.count(old) != 1:
                    raise SystemExit(f"{name}: no single test {method}")
                text = text.replace(old, f"    @adapt.inapplicable({test_id!r})\n{old}")
        (package / name).write_text(text)


def inapplicable(test_id: str) -> Callable[[Any], Any]:
    return unittest.skip(f"inapplicable to a database backend: {INAPPLICABLE[test_id]}")


# ---- what the rewritten tests call ----------------------------------------------------

def run(result: Any) -> Any:
    """Run the worker of ``result``'s backend in burst mode (its queue until empty), in
    this process, then refresh ``result``."""
    from django.core.management import call_command
    call_command("portq_worker", "--backend", result.backend, "--queue",
                 result.task.queue_name, "--burst", "--concurrency", "1",
                 stdout=io.StringIO())
    result.refresh()
    return result


async def arun(result: Any) -> Any:
    from asgiref.sync import sync_to_async
    return await sync_to_async(run)(result)


def results(backend: Any) -> list[Any]:
    """The dummy backend's ``results``: every task this backend enqueued, oldest first."""
    from portq.contrib.django.results import portq_queue
    queue = backend.queue
    prefix = portq_queue(backend.alias, "")
    with _cursor(backend) as cur:
        cur.execute(f"SELECT job_id, queue FROM {queue.backend.prefix}job ORDER BY job_id")
        rows = [(job_id, name.decode() if isinstance(name, bytes) else name)
                for job_id, name in cur.fetchall()]  # MySQL's queue is VARBINARY
    ids = [job_id for job_id, name in rows if name.startswith(prefix)]
    return [backend.get_result(str(job_id)) for job_id in ids]


async def aresults(backend: Any) -> list[Any]:
    from asgiref.sync import sync_to_async
    found: list[Any] = await sync_to_async(results)(backend)
    return found


def clear(backend: Any = None) -> None:
    """The dummy backend's ``clear()``: no job is left (every alias: they share tables)."""
    from django.tasks import default_task_backend
    backend = backend or default_task_backend
    prefix = backend.queue.backend.prefix
    with _cursor(backend) as cur:
        for table in ("result", "job_error", "job_unique", "job"):
            cur.execute(f"DELETE FROM {prefix}{table}")


def _cursor(backend: Any) -> Any:
    from django.db import connections
    return connections[backend.database].cursor()


def _database_test_case() -> type:
    from django.test import TransactionTestCase

    class DatabaseTestCase(TransactionTestCase):
        """Tasks commit (so the worker sees them); each test starts with no job."""

        @classmethod
        def _pre_setup(cls) -> None:  # before each test
            super()._pre_setup()
            from portq.contrib.django import PortqBackend
            clear(PortqBackend("adapt", {"OPTIONS": {}}))
    return DatabaseTestCase


# ---- settings and the run -------------------------------------------------------------

def _server(engine: str, url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    return {"ENGINE": engine, "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""), "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "", "PORT": str(parts.port or "")}


def database(engine: str, workdir: Path) -> dict[str, Any]:
    if engine == "sqlite":  # files, not :memory:: portq's worker opens its own connection
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(workdir / "db.sqlite3"),
                "TEST": {"NAME": str(workdir / "test.sqlite3")}}
    if engine == "postgres":
        return _server("django.db.backends.postgresql", os.environ["PORTQ_TEST_PG_URL"])
    if engine == "mysql":  # PyMySQL stands in for mysqlclient (see examples/django)
        import pymysql
        pymysql.version_info = (2, 2, 1, "final", 0)
        pymysql.install_as_MySQLdb()
        return _server("django.db.backends.mysql", os.environ["PORTQ_TEST_MYSQL_URL"])
    raise SystemExit(f"unknown engine {engine!r}: sqlite, postgres or mysql")


def main(engine: str, source_dir: str) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="portq-django-suite-"))
    try:
        rewrite(Path(source_dir), workdir / "tasks")
        sys.path.insert(0, str(workdir))
        sys.modules.setdefault("adapt", sys.modules[__name__])
        import django
        from django.conf import settings
        settings.configure(
            DATABASES={"default": database(engine, workdir)}, USE_TZ=True,
            INSTALLED_APPS=["portq.contrib.django"], SECRET_KEY="django-suite",
            TASKS={"default": {"BACKEND": PORTQ, "OPTIONS": OPTIONS}})
        django.setup()
        global DatabaseTestCase
        DatabaseTestCase = _database_test_case()
        from django.test.runner import DiscoverRunner

        class Runner(DiscoverRunner):  # type: ignore[misc]
            def setup_databases(self, **kwargs: Any) -> Any:
                old = super().setup_databases(**kwargs)
                from portq.contrib.django import PortqBackend
                backend = PortqBackend("adapt", {"OPTIONS": {}})
                backend.queue.migrate()
                backend.close()
                return old

            def run_suite(self, suite: Any, **kwargs: Any) -> Any:
                self.result = super().run_suite(suite, **kwargs)
                return self.result

        labels = [f"tasks.{name[:-3]}" for name in REWRITES]
        runner = Runner(verbosity=2, interactive=False)
        failures: int = runner.run_tests(labels)
        skipped = sorted(test.id() for test, _ in runner.result.skipped)
        if len(skipped) != len(INAPPLICABLE):  # only the tests listed here may be skipped
            print(f"expected {len(INAPPLICABLE)} skipped tests, got {skipped}")
            return 1
        return 1 if failures else 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


DatabaseTestCase: Any = None

if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    sys.exit(main(sys.argv[1], sys.argv[2]))
