"""The ``django.tasks`` backend contract of ``PortqBackend`` beyond the happy path (issue
29), on SQLite, PostgreSQL and MariaDB, with the worker run in burst mode in this process
(``manage.py portq_worker --burst`` through ``call_command``). Django's own tests/tasks
suite runs in .ci/run (tests/django_suite/adapt.py)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

# first: it skips this module where Django 6 is missing (Python < 3.12), naming why
from test_django import _backend, alias  # noqa: F401 - the engines' fixture

# isort: split
import contract_tasks as ct
from django.core.management import call_command
from django.core.management.base import CommandError
from django.core.signals import request_finished
from django.db import connections, transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings
from django.utils import timezone

from portq.conformance.helpers import wait_until
from portq.contrib.django import PortqBackend
from portq.contrib.django.results import task_error


@pytest.fixture
def tb(alias: str) -> Iterator[str]:  # noqa: F811 - the fixture imported above
    """TASKS aliases "t" and "u" on ``alias``'s database (portq tables prefixed djq_), one
    attempt each (as Django's backends), queues default and emails; yields "t"."""
    backend = {"BACKEND": "portq.contrib.django.PortqBackend", "QUEUES": ["default", "emails"],
               "OPTIONS": {"database": alias, "prefix": "djq_", "max_attempts": 1}}
    tasks = {**{a: dict(backend) for a in ("t", "u")}, "default": dict(backend)}
    with override_settings(TASKS=tasks):
        yield "t"
        for name in ("t", "u", "default"):
            task_backends[name].close()


def burst(name: str, *queues: str) -> str:
    out = io.StringIO()
    call_command("portq_worker", "--backend", name, "--burst", "--concurrency", "2",
                 *[f"--queue={q}" for q in queues or ("default", "emails")], stdout=out)
    return out.getvalue()


def ran(result: Any) -> Any:
    burst(result.backend)
    return task_backends[result.backend].get_result(result.id)


def test_signals_and_django_log_lines(tb: str, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, str, str]] = []

    def receiver(signal_name: str) -> Any:
        def got(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((signal_name, task_result.id, task_result.status))
        return got
    receivers = {s: receiver(n) for s, n in ((task_enqueued, "enqueued"),
                                             (task_started, "started"),
                                             (task_finished, "finished"))}
    for signal, fn in receivers.items():
        signal.connect(fn)
    try:
        with caplog.at_level(logging.DEBUG, logger="django.tasks"):
            ok = ct.add.using(backend=tb).enqueue(2, 3)
            bad = ct.multi_line.using(backend=tb).enqueue()
            burst(tb)
    finally:
        for signal, fn in receivers.items():
            signal.disconnect(fn)
    assert ("enqueued", ok.id, "READY") in seen and ("started", ok.id, "RUNNING") in seen
    assert ("finished", ok.id, "SUCCESSFUL") in seen and ("finished", bad.id, "FAILED") in seen
    lines = [r for r in caplog.records if r.name == "django.tasks"]
    assert any(f"id={ok.id}" in r.getMessage() and "state=SUCCESSFUL" in r.getMessage()
               for r in lines)
    failed = [r for r in lines if f"id={bad.id}" in r.getMessage() and r.levelname == "ERROR"]
    assert len(failed) == 1 and failed[0].exc_info and failed[0].exc_info[0] is ValueError


def test_get_result_equals_the_enqueued_result_and_times_are_the_databases(tb: str) -> None:
    result = ct.add.using(backend=tb).enqueue(1, 1)
    assert task_backends[tb].get_result(result.id) == result  # enqueued_at: created_at
    record = _backend_of(tb).queue.job(int(result.id))
    assert record is not None and record.created_at == result.enqueued_at


def _backend_of(name: str) -> PortqBackend:
    backend = task_backends[name]
    assert isinstance(backend, PortqBackend)
    return backend


def test_each_attempts_start_is_stored_and_reported(alias: str) -> None:  # noqa: F811
    backend = _backend(alias)  # settings: 2 attempts
    result = ct.add.using(backend=alias).enqueue(1, 2)
    queue, name = backend.queue, f"{alias}:default"
    (job,) = queue.claim(name, "w1", lease=30)
    running = backend.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING
    assert running.started_at is not None and running.started_at == running.last_attempted_at
    assert running.started_at >= running.enqueued_at and running.worker_ids == ["w1"]
    assert queue.fail(job, "first", retry_in=0)
    retrying = backend.get_result(result.id)
    assert retrying.status == TaskResultStatus.READY and retrying.attempts == 1
    assert retrying.started_at == running.started_at == retrying.last_attempted_at
    (job,) = queue.claim(name, "w2", lease=30)
    assert queue.fail(job, "second", retry_in=0)
    failed = backend.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and failed.worker_ids == ["w1", "w2"]
    assert failed.started_at == running.started_at  # the first attempt's start
    assert failed.last_attempted_at is not None and failed.finished_at is not None
    assert failed.started_at <= failed.last_attempted_at <= failed.finished_at
    assert [e.traceback for e in failed.errors] == ["first", "second"]


def test_a_task_enqueued_in_an_open_transaction_is_readable_in_it(tb: str) -> None:
    with transaction.atomic(using=connections[_backend_of(tb).database].alias):
        result = ct.add.using(backend=tb).enqueue(4, 4)
        assert task_backends[tb].get_result(result.id).status == TaskResultStatus.READY
        with pytest.raises(CommandError, match="transaction open"):
            burst(tb)  # would not see the task (and would wait for SQLite's lock)
    assert ran(result).return_value == 8


def test_use_tz_false_gives_naive_local_times(tb: str) -> None:
    with override_settings(USE_TZ=False, TIME_ZONE="Asia/Kolkata"):  # UTC+05:30
        enqueued = ct.add.using(backend=tb).enqueue(1, 2)
        assert enqueued.enqueued_at is not None and enqueued.enqueued_at.tzinfo is None
        assert abs(enqueued.enqueued_at - datetime.now()) < timedelta(minutes=1)  # local
        assert task_backends[tb].get_result(enqueued.id) == enqueued
        result = ran(enqueued)
        assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
        times = [result.enqueued_at, result.started_at, result.last_attempted_at,
                 result.finished_at]
        assert all(t is not None and t.tzinfo is None for t in times)
        assert times == sorted(times)  # type: ignore[type-var]
        later = datetime.now() + timedelta(hours=1)  # naive: USE_TZ=False takes local time
        deferred = ct.add.using(backend=tb, run_after=later).enqueue(1, 1)
        fetched = task_backends[tb].get_result(deferred.id)
        assert fetched.task.run_after == later and fetched.status == TaskResultStatus.READY
        record = _backend_of(tb).queue.job(int(deferred.id))  # portq's own connection
        assert record is not None and record.run_at == timezone.make_aware(later)


def test_errors_carry_the_real_class_and_the_whole_traceback(tb: str) -> None:
    multi = ran(ct.multi_line.using(backend=tb).enqueue())
    (error,) = multi.errors
    assert error.exception_class is ValueError
    assert "first line\nsecond line" in error.traceback and "a note" in error.traceback
    deep = ran(ct.deep.using(backend=tb).enqueue(40))
    assert deep.errors[0].exception_class is LookupError
    frames = deep.errors[0].traceback.count("in _ping") + \
        deep.errors[0].traceback.count("in _pong")
    assert frames == 81, frames  # every frame (ping 41, pong 40), not the last 8
    not_json = ran(ct.not_json.using(backend=tb).enqueue())
    assert not_json.status == TaskResultStatus.FAILED
    assert not_json.errors[0].exception_class is TypeError
    assert "Unsupported type" in not_json.errors[0].traceback
    with pytest.raises(TypeError, match="Unsupported type"):
        ct.add.using(backend=tb).enqueue(datetime.now(UTC), 1)
    # texts portq itself writes (the worker's, the reaper's) name importable classes
    assert task_error("ResultError: the result is 2000000 bytes").exception_class_path == \
        "portq.errors.ResultError"
    assert task_error("Permanent: task 'x' cannot be imported").exception_class_path == \
        "portq.errors.Permanent"
    assert task_error("lease expired").exception_class_path == "builtins.Exception"


@pytest.mark.parametrize("task,cls", [("system_exit", SystemExit),
                                      ("keyboard_interrupt", KeyboardInterrupt)])
def test_system_exit_and_keyboard_interrupt_fail_the_task_not_the_worker(
        tb: str, task: str, cls: type[BaseException]) -> None:
    result = getattr(ct, task).using(backend=tb).enqueue()
    after = ct.add.using(backend=tb).enqueue(2, 2)
    out = burst(tb)
    failed = task_backends[tb].get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED, out
    assert failed.errors[0].exception_class is cls
    assert failed.errors[0].exception_class_path == f"builtins.{cls.__name__}"
    assert task_backends[tb].get_result(after.id).return_value == 4  # the worker ran on


def test_the_result_keeps_the_tasks_using_settings_and_context_times(tb: str) -> None:
    past = datetime.now(UTC) - timedelta(seconds=5)
    task = ct.context_times.using(backend=tb, priority=7, queue_name="emails", run_after=past)
    result = task.enqueue()
    fetched = task_backends[tb].get_result(result.id)
    assert fetched.task == task and fetched.task.priority == 7
    assert (fetched.task.queue_name, fetched.task.run_after) == ("emails", past)
    done = ran(result)
    seen = done.return_value
    assert seen["enqueued_at"] == done.enqueued_at.isoformat()
    assert seen["started_at"] == done.started_at.isoformat()
    assert (seen["attempt"], seen["priority"], seen["queue"]) == (1, 7, "emails")


def test_two_aliases_on_one_database_keep_their_own_jobs(tb: str) -> None:
    result = ct.add.using(backend=tb).enqueue(5, 5)
    burst("u")  # the other alias's worker
    assert task_backends[tb].get_result(result.id).status == TaskResultStatus.READY
    with pytest.raises(TaskResultDoesNotExist, match="TASKS\\['u'\\]"):
        task_backends["u"].get_result(result.id)
    done = ran(result)
    assert done.backend == tb and done.return_value == 10


def test_missing_results_and_tasks_whose_code_is_gone(tb: str) -> None:
    backend = _backend_of(tb)
    for bad in ("99999999999999999999", "0", "-1", "abc", str(2**31 - 1)):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(bad)
    job_id = backend.queue.enqueue(f"{tb}:default", {
        "task": "contract_tasks.removed_since", "args": [], "kwargs": {}, "queue": "default",
        "run_after": None})
    burst(tb)
    gone = backend.get_result(str(job_id))
    assert gone.status == TaskResultStatus.FAILED
    assert gone.task.module_path == "contract_tasks.removed_since"
    assert "cannot be imported" in gone.errors[0].traceback
    with pytest.raises(ImportError):
        gone.task.call()


def _session_alive(database: str, pid: int) -> bool:
    with connections[database].cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return bool(cur.fetchone()[0])


def test_portq_connections_close_with_the_request(tb: str) -> None:
    """What let ``manage.py test`` fail to drop a PostgreSQL test database."""
    backend = _backend_of(tb)
    result = ct.add.using(backend=tb).enqueue(1, 1)
    backend.get_result(result.id)  # read on Django's connection: no pool of portq's
    assert backend._queue is None or backend._queue.backend.pool._size == 0
    backend.queue.backend.check_schema()  # opens portq's pool
    pool = backend.queue.backend.pool
    assert pool._size == 1
    (conn,) = pool._idle
    pid = conn.info.backend_pid if connections[backend.database].vendor == "postgresql" \
        else None
    if pid is not None:
        assert _session_alive(backend.database, pid)
    request_finished.send(sender=None)
    assert pool._size == 0 and backend._queue is None, "the request left portq's pool open"
    if pid is not None:
        assert wait_until(lambda: not _session_alive(backend.database, pid), timeout=10)


def test_a_cancelled_task_fails_with_the_cancellation(tb: str) -> None:
    result = ct.add.using(backend=tb).enqueue(1, 1)
    assert _backend_of(tb).queue.cancel(int(result.id))
    cancelled = task_backends[tb].get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.errors[-1].exception_class_path == "portq.errors.JobCancelled"
    assert cancelled.errors[-1].exception_class.__name__ == "JobCancelled"


def test_manage_py_check_says_to_run_portq_migrate(tmp_path: Any) -> None:
    empty = tmp_path / "empty.sqlite3"
    tasks = {"default": {"BACKEND": "portq.contrib.django.PortqBackend",
                         "OPTIONS": {"url": f"sqlite:///{empty}"}}}
    with override_settings(TASKS=tasks):
        err = io.StringIO()
        call_command("check", stderr=err, stdout=io.StringIO())
        assert "portq.W001" in err.getvalue()
        assert "run manage.py portq_migrate --backend default" in err.getvalue()
        task_backends["default"].queue.migrate()
        task_backends["default"].close()
        assert task_backends["default"].check() == []


def test_a_finished_request_leaves_the_pool_of_a_serving_worker_open(tb: str) -> None:
    backend = _backend_of(tb)
    with backend.serving() as queue:
        queue.backend.check_schema()
        request_finished.send(sender=None)  # e.g. a live-server test's request
        assert backend._queue is queue and queue.backend.pool._size == 1
        queue.backend.check_schema()  # still usable
    assert backend._queue is None and queue.backend.pool._size == 0


def test_bad_configuration_is_one_clear_error_without_the_password() -> None:
    from django.core.exceptions import ImproperlyConfigured
    with pytest.raises(ImproperlyConfigured, match="TASKS alias 'two words'"):
        PortqBackend("two words", {})
    unreachable = PortqBackend("x", {"OPTIONS": {
        "url": "postgresql://app:s3cret-pw@127.0.0.1:1/nowhere"}})
    (warning,) = unreachable.check()
    assert warning.id == "portq.W002" and "cannot check portq's tables" in warning.msg
    assert "s3cret-pw" not in warning.msg and "s3cret-pw" not in str(warning.hint)


def test_a_task_raising_portq_permanent_is_not_retried(alias: str) -> None:  # noqa: F811
    backend = _backend(alias)  # settings: 2 attempts, 0.2 s apart
    result = ct.refuse.using(backend=alias).enqueue()
    burst(alias)
    failed = backend.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and failed.attempts == 1
    assert failed.errors[0].exception_class_path == "portq.errors.Permanent"
    assert failed.errors[0].traceback.endswith("portq.errors.Permanent: never worth retrying\n")
