"""The dashboard's pages (GET, never a change of state) and the data they show: the
overview, the Jobs list, a job, workers, schedules and the bulk action's confirmation."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from portq.backends.dependencies import neighbours
from portq.errors import PortqError, StatementTimeout
from portq.job import (
    SCHEDULED,
    JobRecord,
    QueueStats,
    State,
    WorkerActivity,
    WorkerInfo,
)
from portq.queue import Queue
from portq.registry import workers_per_queue
from portq.web.actions import ACTIONS
from portq.web.context import SEARCHES_AT_ONCE, dashboard_of

log = logging.getLogger("portq.web")
PAGE_SIZE = 50
WORKFLOW_SHOWN = 50       # a job page's dependencies (and dependents) shown; the rest counted
MINUTES = 60              # the overview's throughput window
STATES = [State.READY.value, SCHEDULED, *(s.value for s in State if s != State.READY)]
ORDERS = {"-id": "newest first", "id": "oldest first", "run_at": "run_at"}
NOTICES = {  # ?done=... after an action; fixed text, never echoed from the request
    "retried": "Job retried: it is ready again.",
    "cancelled": "Job cancelled.",
    "deleted": "Job deleted.",
    "refused": "Nothing changed: the job is no longer in a state that allows it.",
    "bulk": "Bulk action done.",
}


class Busy(Exception):
    """Too many payload searches run at once."""


def overview(request: Request) -> Response:
    dash = dashboard_of(request)
    return dash.render(request, "overview.html", data=snapshot(request).get())


def overview_api(request: Request) -> Response:
    return JSONResponse(snapshot(request).get())


def snapshot(request: Request) -> Snapshot:
    """The dashboard's shared overview snapshot (made on first use)."""
    dash = dashboard_of(request)
    shot = dash.caches.get("overview")
    if shot is None:
        shot = dash.caches.setdefault("overview", Snapshot(
            lambda: overview_data(dash.queue), max_age=dash.settings.poll_seconds / 2))
    assert isinstance(shot, Snapshot)
    return shot


def list_jobs(request: Request, f: JobFilter) -> tuple[list[JobRecord], str | None, int]:
    """The rows of the Jobs page, or why there are none (a message and its status)."""
    dash = dashboard_of(request)
    searching = bool(f.text)
    try:
        if searching and not dash.searches.acquire(blocking=False):
            raise Busy(f"{SEARCHES_AT_ONCE} payload searches are running already: try "
                       "again in a moment, or narrow the search by key.")
        try:
            rows = dash.queue.jobs(f.state, queue=f.queue, key=f.key, text=f.text,
                                   order=f.order, limit=PAGE_SIZE, after_id=f.after_id,
                                   after_run_at=f.after_run_at)
        finally:
            if searching:
                dash.searches.release()
    except Busy as exc:
        return [], str(exc), 503
    except StatementTimeout:
        return [], (f"The database stopped this listing after "
                    f"{timeout_text(dash.queue)}: narrow it by queue, state or key "
                    "(a payload search reads every payload it passes)."), 503
    except PortqError as exc:
        return [], str(exc), 400
    return rows, None, 200


def jobs(request: Request) -> Response:
    dash = dashboard_of(request)
    f = JobFilter.from_query(request.query_params)
    rows, error, status = list_jobs(request, f)
    next_query = None
    if len(rows) == PAGE_SIZE:
        last = rows[-1]
        next_query = f.query(after=str(last.id), after_run_at=(
            last.run_at.isoformat() if f.order == "run_at" and last.run_at else None))
    read_only = dash.settings.read_only
    bulk = [] if read_only or f.key or f.text or not f.state else \
        [(name, label) for name, (label, states) in ACTIONS.items() if f.state in states]
    try:  # the queue filter's choices: the workers' registry, read after the listing
        queues = served_queues(dash.queue.workers())
    except StatementTimeout:
        # a loaded database stopped this small read too: the page keeps its own answer
        # (a stopped listing's readable 503), the filter offers no queue names
        queues = []
    return dash.render(request, "jobs.html", status=status, f=f, rows=rows,
                       page_size=PAGE_SIZE, select=not read_only and bool(rows),
                       live="jobs" if not f.after_id and not error else None,
                       error=error, next_query=next_query, first_query=f.query(),
                       bulk=bulk, queues=queues,
                       states=STATES, orders=ORDERS, notice=notice(request))


def job(request: Request) -> Response:
    dash = dashboard_of(request)
    queue, job_id = dash.queue, request.path_params["job_id"]
    record = queue.job(job_id) if 0 < job_id < 2**63 else None
    if record is None:
        return dash.render(request, "message.html", status=404, title="No such job",
                           message=f"There is no job {job_id}.")
    actions = [] if dash.settings.read_only else \
        [(name, label) for name, (label, states) in ACTIONS.items()
         if record.state in states]
    result = queue.result(job_id) if record.state == State.SUCCEEDED else None
    return dash.render(request, "job.html", job=record,
                       errors=queue.error_history(job_id),
                       concurrency=queue.concurrency_of(job_id),
                       live="job" if record.state in ("ready", "running") else None,
                       result=None if record.state != State.SUCCEEDED else
                       json.dumps(result, indent=2, ensure_ascii=False),
                       payload=json.dumps(record.payload, indent=2, ensure_ascii=False),
                       actions=actions, notice=notice(request),
                       workflow=neighbours(queue.backend, job_id, WORKFLOW_SHOWN))


def job_api(request: Request) -> Response:
    """What the job page refreshes while the job runs: its state and progress."""
    queue, job_id = dashboard_of(request).queue, request.path_params["job_id"]
    record = queue.job(job_id) if 0 < job_id < 2**63 else None
    if record is None:
        return JSONResponse({"error": f"no such job {job_id}"}, status_code=404)
    return JSONResponse(job_live(record))


def workers(request: Request) -> Response:
    dash = dashboard_of(request)
    return dash.render(request, "workers.html", workers=worker_rows(
        dash.queue.workers(), dash.queue.worker_activity()))


def schedules(request: Request) -> Response:
    dash = dashboard_of(request)
    return dash.render(request, "schedules.html",
                       schedules=schedule_rows(dash.queue.workers()))


def bulk_confirm(request: Request) -> Response:
    dash = dashboard_of(request)
    if dash.settings.read_only:
        return dash.refuse(request, 403, "This dashboard is read-only.")
    q = request.query_params
    action, state, name = q.get("action", ""), q.get("state", ""), q.get("queue") or None
    if action not in ACTIONS or state not in ACTIONS[action][1]:
        return dash.refuse(request, 400, "That bulk action does not apply to that state.")
    try:
        count = matching_count(dash.queue.stats(name), state)
    except PortqError as exc:
        return dash.refuse(request, 400, str(exc))
    return dash.render(request, "confirm.html", action=action, label=ACTIONS[action][0],
                       state=state, queue_name=name, count=count)


def routes() -> list[Route]:
    """The page routes (GET)."""
    return [Route("/", overview, name="overview"),
            Route("/api/overview", overview_api),
            Route("/jobs", jobs),
            Route("/jobs/{job_id:int}", job),
            Route("/api/jobs/{job_id:int}", job_api),
            Route("/bulk", bulk_confirm),
            Route("/workers", workers),
            Route("/schedules", schedules)]


def timeout_text(queue: Queue) -> str:
    ms = queue.backend.statement_timeout_ms
    return f"{ms / 1000:g} s" if ms else "its statement timeout"


def notice(request: Request) -> str | None:
    """The fixed notice a ``?done=`` redirect asks for (never text from the request)."""
    done = request.query_params.get("done")
    text = NOTICES.get(done or "")
    count = request.query_params.get("count", "0")
    changed = int(count) if count.isdigit() and len(count) < 10 else 0
    if done == "bulk":
        text = f"Bulk action done: {changed} jobs changed."
    if done == "selected":
        skipped = request.query_params.get("skipped", "0")
        left = int(skipped) if skipped.isdigit() and len(skipped) < 10 else 0
        text = f"Selected jobs: {changed} changed" + (
            f", {left} left as they were (no longer in a state that allows it)."
            if left else ".")
    return text


# ---- page data ------------------------------------------------------------------------

@dataclass(frozen=True)
class JobFilter:
    """The Jobs page's filter and cursor, as read from (and written back to) the URL."""

    queue: str | None
    state: str | None
    key: str | None
    text: str | None
    order: str
    after_id: int
    after_run_at: datetime | None

    @classmethod
    def from_query(cls, q: Mapping[str, str]) -> JobFilter:
        after = q.get("after", "")
        after_run_at = None
        try:
            after_run_at = datetime.fromisoformat(q["after_run_at"]) \
                if q.get("after_run_at") else None
        except ValueError:
            after_run_at = None
        return cls(queue=q.get("queue") or None, state=q.get("state") or None,
                   key=q.get("key") or None, text=q.get("text") or None,
                   order=q.get("order") or "-id",
                   after_id=int(after) if after.isdigit() and len(after) < 19 else 0,
                   after_run_at=after_run_at)

    def query(self, **more: str | None) -> str:
        """The URL query of this filter (first page), plus ``more``."""
        fields = {"queue": self.queue, "state": self.state, "key": self.key,
                  "text": self.text, "order": self.order if self.order != "-id" else None,
                  **more}
        return urlencode({k: v for k, v in fields.items() if v})


class Snapshot:
    """Page data shared by every browser that polls it, recounted in the background,
    never by a request that already has a snapshot to show: a stale snapshot is served
    while one recount runs. Recounts start at most every ``max_age`` seconds, and never
    more often than every three times the last recount's duration, so a slow count on a
    big table takes at most a third of one connection's time. Only the very first request
    waits."""

    def __init__(self, compute: Callable[[], dict[str, Any]], max_age: float) -> None:
        self.compute = compute
        self.max_age = max_age
        self._lock = threading.Lock()
        self._value: dict[str, Any] | None = None
        self._started = 0.0          # monotonic time the last recount started
        self._took = 0.0             # how long it took
        self._running = False

    def get(self) -> dict[str, Any]:
        with self._lock:
            value = self._value
            due = time.monotonic() - self._started >= max(self.max_age, 3 * self._took)
            start = value is not None and due and not self._running
            if start:
                self._running, self._started = True, time.monotonic()
        if value is None:
            with self._lock:  # the first request computes; concurrent first requests wait
                if self._value is None:
                    self._recount()
                return self._value  # type: ignore[return-value]
        if start:
            threading.Thread(target=self._background, name="portq-overview",
                             daemon=True).start()
        return value

    def _recount(self) -> None:
        started = time.monotonic()
        value = self.compute()
        self._value, self._started = value, started
        self._took = time.monotonic() - started

    def _background(self) -> None:
        try:
            value = self.compute()
            with self._lock:
                self._value = value
                self._took = time.monotonic() - self._started
        except Exception as exc:  # noqa: BLE001 - keep serving the last snapshot
            log.warning("dashboard.overview_error error=%s: %s", type(exc).__name__, exc)
        finally:
            with self._lock:
                self._running = False


def overview_data(queue: Queue) -> dict[str, Any]:
    """Per-queue counts, the oldest ready job's age, live workers and the last hour's
    finished jobs per minute (the JSON of /api/overview)."""
    stats = queue.stats()
    series = queue.finished_per_minute(MINUTES)
    serving = workers_per_queue(queue.workers())
    rows = []
    for s in stats:
        per_state = series.get(s.queue, {})
        finished = [sum(v[i] for v in per_state.values()) for i in range(MINUTES)]
        rows.append({**s.as_dict(), "workers": serving.get(s.queue, 0),
                     "finished_per_minute": finished,
                     "dead_per_minute": per_state.get("dead", [0] * MINUTES),
                     "finished_last_hour": sum(finished)})
    return {"queues": rows, "minutes": MINUTES,
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds")}


def served_queues(workers: list[WorkerInfo]) -> list[str]:
    """The queues live workers serve: suggestions for the Jobs page's queue filter (read
    from the small registry table; listing every queue name would scan the job table)."""
    return sorted({name for w in workers for name in w.queues})


def matching_count(stats: list[QueueStats], state: str) -> int:
    """How many jobs of ``state`` the queues of ``stats`` hold (exact counts)."""
    if state == "ready":
        return sum(s.ready + s.scheduled for s in stats)
    return sum(int(getattr(s, state)) for s in stats)


def worker_rows(workers: list[WorkerInfo],
                activity: Mapping[str, WorkerActivity]) -> list[dict[str, Any]]:
    """The Workers page's rows: each worker with the running jobs the job table says it
    holds, and whether it looks gone: a process of this host that no longer exists, or a
    heartbeat later than one and a half registry intervals (its row's lifetime is three)."""
    rows = []
    here = socket.gethostname()[:255]
    for w in workers:
        seen = activity.get(w.worker_id)
        age = w.heartbeat_age_s or 0.0
        status = "live"
        if w.host == here and not process_exists(w.pid):
            status = f"gone: process {w.pid} no longer runs on this host"
        elif seen is not None and age > 0.5 * (age + seen.expires_in_s):
            status = (f"stale: no heartbeat for {age:.0f} s; listed until its row "
                      f"expires in {seen.expires_in_s:.0f} s")
        rows.append({"w": w, "running": None if seen is None else seen.running,
                     "status": status})
    return rows


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True   # it exists (another user's), or we cannot tell
    return True


def schedule_rows(workers: list[WorkerInfo]) -> list[dict[str, Any]]:
    """The cron entries the live workers run, one row per schedule name: the soonest next
    due time, the latest enqueued run, and which workers run it."""
    merged: dict[str, dict[str, Any]] = {}
    for w in workers:
        for entry in w.schedules:
            name = str(entry.get("name"))
            row = merged.setdefault(name, {"name": name, "queue": entry.get("queue"),
                                           "cron": entry.get("cron"), "next_due": None,
                                           "last_enqueued": None, "workers": []})
            row["workers"].append(w.worker_id)
            for k, pick in (("next_due", min), ("last_enqueued", max)):
                value = entry.get(k)
                if value:
                    row[k] = value if row[k] is None else pick(row[k], value)
    return sorted(merged.values(), key=lambda r: r["name"])


def job_live(record: JobRecord) -> dict[str, Any]:
    """The fields of a job that change while it runs (``/api/jobs/ID``, JSON-ready)."""
    return {"id": record.id, "state": record.state,
            "attempts": record.attempts, "max_attempts": record.max_attempts,
            "worker_id": record.worker_id, "progress": record.progress,
            "progress_note": record.progress_note,
            "progress_at": None if record.progress_at is None else
            record.progress_at.isoformat(),
            "progress_text": record.progress_text()}
