"""The dashboard's routes (Starlette) and page data, over portq's public :class:`Queue` API.

GET never changes state; every action is a POST carrying the session's CSRF token, and
is refused (403) in read-only mode. All user data (payloads, keys, queue names, errors,
worker ids) reaches the page through Jinja2's autoescaping or, for live updates, through
``textContent`` in app.js; the Content-Security-Policy allows no inline script at all.
"""

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
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from portq.errors import PortqError, StatementTimeout
from portq.job import (
    SCHEDULED,
    JobRecord,
    QueueStats,
    State,
    WorkerActivity,
    WorkerInfo,
    error_line,
)
from portq.queue import Queue
from portq.registry import workers_per_queue
from portq.web.gate import BadRequest, Gate
from portq.web.queues import limits_text, queue_routes
from portq.web.security import SESSION_COOKIE, Guard
from portq.web.selected import selected_routes

log = logging.getLogger("portq.web")
HERE = Path(__file__).resolve().parent
PAGE_SIZE = 50
BULK_BATCH = 500          # rows per statement of a bulk action
MINUTES = 60              # the overview's throughput window
STATES = [State.READY.value, SCHEDULED, *(s.value for s in State if s != State.READY)]
ORDERS = {"-id": "newest first", "id": "oldest first", "run_at": "run_at"}
# what each action does, and the states it applies to
ACTIONS = {
    "retry": ("Retry", ("dead", "cancelled")),
    "cancel": ("Cancel", ("ready", "running")),
    "delete": ("Delete", ("succeeded", "dead", "cancelled")),
}
NOTICES = {  # ?done=... after an action; fixed text, never echoed from the request
    "retried": "Job retried: it is ready again.",
    "cancelled": "Job cancelled.",
    "deleted": "Job deleted.",
    "refused": "Nothing changed: the job is no longer in a state that allows it.",
    "bulk": "Bulk action done.",
}
MAX_FORM_FIELDS = 20
#: payload searches (a scan of the payloads) that may run at once: the others are told to
#: try again, so that searches never hold every pooled connection and job pages still load
SEARCHES_AT_ONCE = 2


@dataclass(frozen=True)
class Settings:
    read_only: bool
    poll_seconds: float
    database: str


def database_label(queue: Queue) -> str:
    """Engine, host and database name: never a user name, password or URL option."""
    url = queue.backend.url
    if url.engine == "sqlite":
        return f"sqlite · {os.path.basename(url.path)}"
    where = url.netloc_hosts
    return f"{url.engine} · {where}/{url.database or ''}"


def build(queue: Queue, *, read_only: bool, token: str | None, poll_seconds: float,
          allowed_hosts: frozenset[str] | None, max_body: int,
          trusted_origins: frozenset[str],
          session_seconds: float) -> Starlette:
    guard = Guard(token, session_seconds)
    settings = Settings(read_only=read_only, poll_seconds=max(1.0, float(poll_seconds)),
                        database=database_label(queue))
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(["html"], default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    env.filters["age"] = _age
    env.filters["compact"] = _compact
    env.filters["error_line"] = error_line
    env.filters["limits"] = limits_text
    env.globals["chart"] = chart_svg

    def render(request: Request, template: str, status: int = 200, **ctx: Any) -> Response:
        session = request.state.session_id
        html = env.get_template(template).render(
            base=request.scope.get("root_path", ""), settings=settings,
            csrf=guard.csrf_token(session), path=request.url.path,
            logged_in=guard.needs_login, **ctx)
        return HTMLResponse(html, status_code=status)

    def error_page(base: str, status: int, title: str, message: str) -> str:
        return env.get_template("message.html").render(
            base=base, settings=settings, csrf="", path="", logged_in=False, title=title,
            message=message, status=status)

    def refuse(request: Request, status: int, message: str) -> Response:
        return render(request, "message.html", status=status, title="Refused",
                      message=message)

    # ---- pages ------------------------------------------------------------------------

    snapshot = Snapshot(lambda: overview_data(queue), max_age=settings.poll_seconds / 2)

    def overview(request: Request) -> Response:
        return render(request, "overview.html", data=snapshot.get())

    def overview_api(request: Request) -> Response:
        return JSONResponse(snapshot.get())

    searches = threading.BoundedSemaphore(SEARCHES_AT_ONCE)

    def jobs(request: Request) -> Response:
        f = JobFilter.from_query(request.query_params)
        error, rows, status = None, [], 200
        searching = bool(f.text)
        try:
            if searching and not searches.acquire(blocking=False):
                raise Busy(f"{SEARCHES_AT_ONCE} payload searches are running already: try "
                           "again in a moment, or narrow the search by key.")
            try:
                rows = queue.jobs(f.state, queue=f.queue, key=f.key, text=f.text,
                                  order=f.order, limit=PAGE_SIZE, after_id=f.after_id,
                                  after_run_at=f.after_run_at)
            finally:
                if searching:
                    searches.release()
        except Busy as exc:
            error, status = str(exc), 503
        except StatementTimeout:
            error, status = (f"The database stopped this listing after "
                             f"{_timeout_text(queue)}: narrow it by queue, state or key "
                             "(a payload search reads every payload it passes)."), 503
        except PortqError as exc:
            error, status = str(exc), 400
        next_query = None
        if len(rows) == PAGE_SIZE:
            last = rows[-1]
            next_query = f.query(after=str(last.id), after_run_at=(
                last.run_at.isoformat() if f.order == "run_at" and last.run_at else None))
        bulk = [] if settings.read_only or f.key or f.text or not f.state else \
            [(name, label) for name, (label, states) in ACTIONS.items() if f.state in states]
        return render(request, "jobs.html", status=status, f=f, rows=rows,
                      page_size=PAGE_SIZE, select=not settings.read_only and bool(rows),
                      live="jobs" if not f.after_id and not error else None,
                      error=error, next_query=next_query, first_query=f.query(),
                      bulk=bulk, queues=served_queues(queue.workers()), states=STATES,
                      orders=ORDERS, notice=_notice(request))

    def job(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        record = queue.job(job_id) if 0 < job_id < 2**63 else None
        if record is None:
            return render(request, "message.html", status=404, title="No such job",
                          message=f"There is no job {job_id}.")
        actions = [] if settings.read_only else \
            [(name, label) for name, (label, states) in ACTIONS.items()
             if record.state in states]
        result = queue.result(job_id) if record.state == State.SUCCEEDED else None
        return render(request, "job.html", job=record, errors=queue.error_history(job_id),
                      concurrency=queue.concurrency_of(job_id),
                      live="job" if record.state in ("ready", "running") else None,
                      result=None if record.state != State.SUCCEEDED else
                      json.dumps(result, indent=2, ensure_ascii=False),
                      payload=json.dumps(record.payload, indent=2, ensure_ascii=False),
                      actions=actions, notice=_notice(request))

    def job_api(request: Request) -> Response:
        """What the job page refreshes while the job runs: its state and progress."""
        job_id = request.path_params["job_id"]
        record = queue.job(job_id) if 0 < job_id < 2**63 else None
        if record is None:
            return JSONResponse({"error": f"no such job {job_id}"}, status_code=404)
        return JSONResponse(job_live(record))

    def workers(request: Request) -> Response:
        return render(request, "workers.html",
                      workers=worker_rows(queue.workers(), queue.worker_activity()))

    def schedules(request: Request) -> Response:
        return render(request, "schedules.html", schedules=schedule_rows(queue.workers()))

    def bulk_confirm(request: Request) -> Response:
        if settings.read_only:
            return refuse(request, 403, "This dashboard is read-only.")
        q = request.query_params
        action, state, name = q.get("action", ""), q.get("state", ""), q.get("queue") or None
        if action not in ACTIONS or state not in ACTIONS[action][1]:
            return refuse(request, 400, "That bulk action does not apply to that state.")
        try:
            count = matching_count(queue.stats(name), state)
        except PortqError as exc:
            return refuse(request, 400, str(exc))
        return render(request, "confirm.html", action=action, label=ACTIONS[action][0],
                      state=state, queue_name=name, count=count)

    # ---- actions (POST + CSRF) --------------------------------------------------------

    async def guarded(request: Request, act: Callable[[Form], Response],
                      max_fields: int = MAX_FORM_FIELDS) -> Response:
        form = parse_form(await request.body(), max_fields)
        if not guard.csrf_ok(request.state.session_id, form.get("csrf")):
            return refuse(request, 403, "Missing or wrong CSRF token: reload the page and "
                                        "try again.")
        if settings.read_only:
            return refuse(request, 403, "This dashboard is read-only.")
        return await run_in_threadpool(act, form)

    async def job_action(request: Request) -> Response:
        job_id, action = request.path_params["job_id"], request.path_params["action"]
        base = request.scope.get("root_path", "")

        def act(form: dict[str, str]) -> Response:
            if action not in ACTIONS or not 0 < job_id < 2**63:
                return refuse(request, 404, "No such action.")
            done = {"retry": lambda: queue.retry_dead(job_id, extra_attempts=1),
                    "cancel": lambda: queue.cancel(job_id),
                    "delete": lambda: queue.delete_finished(job_id)}[action]()
            if action == "delete" and done:
                return RedirectResponse(f"{base}/jobs?done=deleted", status_code=303)
            notice = {"retry": "retried", "cancel": "cancelled"}.get(action, "refused")
            return RedirectResponse(f"{base}/jobs/{job_id}?done={notice if done else 'refused'}",
                                    status_code=303)
        return await guarded(request, act)

    async def bulk_action(request: Request) -> Response:
        base = request.scope.get("root_path", "")

        def act(form: dict[str, str]) -> Response:
            action, state = form.get("action", ""), form.get("state", "")
            name = form.get("queue") or None
            if action not in ACTIONS or state not in ACTIONS[action][1]:
                return refuse(request, 400, "That bulk action does not apply to that state.")
            try:
                expected = int(form.get("count", ""))
                touched = run_bulk(queue, action, name, state, expected)
            except (ValueError, PortqError) as exc:
                return refuse(request, 400, f"Bulk action refused: {exc}")
            query = urlencode({k: v for k, v in (("queue", name), ("state", state),
                                                 ("done", "bulk"), ("count", touched)) if v})
            return RedirectResponse(f"{base}/jobs?{query}", status_code=303)
        return await guarded(request, act)

    # ---- login (only with a token) ----------------------------------------------------

    def login_page(request: Request) -> Response:
        return render(request, "login.html", failed=False)

    async def login(request: Request) -> Response:
        form = parse_form(await request.body(), 5)
        if not guard.csrf_ok(request.state.session_id, form.get("csrf")):
            return refuse(request, 403, "Missing or wrong CSRF token: reload the page.")
        client = request.client.host if request.client else "-"
        wait = guard.throttle.retry_after(client)
        if wait > 0:
            log.warning("dashboard.login_throttled client=%s retry_after_s=%.0f", client, wait)
            response = render(request, "login.html", status=429, failed=False,
                              wait=max(1, round(wait)))
            response.headers["Retry-After"] = str(max(1, round(wait)))
            return response
        if not guard.needs_login or not guard.token_matches(form.get("token", "")):
            failures = guard.throttle.failed(client)
            log.warning("dashboard.login_failed client=%s failures_last_minute=%d",
                        client, failures)
            return render(request, "login.html", status=403, failed=True)
        response = RedirectResponse(request.scope.get("root_path", "") + "/", status_code=303)
        _set_session(request, response, guard.new_session(authenticated=True))
        return response

    async def logout(request: Request) -> Response:
        form = parse_form(await request.body(), 5)
        if not guard.csrf_ok(request.state.session_id, form.get("csrf")):
            return refuse(request, 403, "Missing or wrong CSRF token: reload the page.")
        guard.revoke(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse(request.scope.get("root_path", "") + "/login",
                                    status_code=303)
        _set_session(request, response, guard.new_session(authenticated=False))
        return response

    # ---- middleware: session cookie, access token, security headers --------------------

    class Sessions(BaseHTTPMiddleware):
        async def dispatch(self, request: Request,
                           call_next: RequestResponseEndpoint) -> Response:
            root = request.scope.get("root_path", "")
            path = request.url.path[len(root):]
            if path.startswith("/static/"):  # assets: no session, no cookie, no login
                return await call_next(request)
            cookie = request.cookies.get(SESSION_COOKIE)
            session = guard.session_id(cookie)
            fresh = None
            if session is None:
                fresh = guard.new_session(authenticated=False)
                session = fresh
            request.state.session_id = session
            auth = request.headers.get("authorization", "")
            bearer = auth[7:] if auth.lower().startswith("bearer ") else None
            response: Response
            if path == "/login" or guard.authenticated(cookie, bearer):
                response = await call_next(request)
            elif path.startswith("/api/"):
                response = JSONResponse({"error": "log in first"}, status_code=401)
            else:
                response = RedirectResponse(root + "/login", status_code=303)
            if fresh is not None:
                _set_session(request, response, fresh, root)
            return response

    routes = [
        Route("/", overview, name="overview"),
        Route("/api/overview", overview_api),
        Route("/jobs", jobs),
        Route("/jobs/{job_id:int}", job),
        Route("/jobs/{job_id:int}/{action:str}", job_action, methods=["POST"]),
        Route("/api/jobs/{job_id:int}", job_api),
        Route("/bulk", bulk_confirm),
        Route("/bulk", bulk_action, methods=["POST"]),
        *queue_routes(queue, render, guarded, settings.read_only, refuse),
        *selected_routes(queue, render, guarded, settings.read_only, refuse),
        Route("/workers", workers),
        Route("/schedules", schedules),
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, middleware=[
        Middleware(Gate, allowed_hosts=allowed_hosts, max_body=max_body,
                   trusted_origins=trusted_origins,
                   error_page=error_page),
        Middleware(Sessions)])


class Busy(Exception):
    """Too many payload searches run at once."""


def _timeout_text(queue: Queue) -> str:
    ms = queue.backend.statement_timeout_ms
    return f"{ms / 1000:g} s" if ms else "its statement timeout"


class Form(dict[str, str]):
    """A posted form: the first value of each field, and every value in ``lists``."""

    def __init__(self, lists: dict[str, list[str]]) -> None:
        super().__init__({k: v[0] for k, v in lists.items()})
        self.lists = lists


def parse_form(body: bytes, max_fields: int) -> Form:
    """The fields of a urlencoded form body; a 400 when it holds more than
    ``max_fields`` fields."""
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=max_fields)
    except ValueError:
        raise BadRequest(400, f"The form has more than {max_fields} fields.") from None
    return Form(fields)


def _set_session(request: Request, response: Response, value: str,
                 root: str | None = None) -> None:
    if root is None:
        root = request.scope.get("root_path", "")
    response.set_cookie(SESSION_COOKIE, value, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path=root or "/")


def _notice(request: Request) -> str | None:
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
    """The overview's data, shared by every browser that polls it. Its counts are a pass
    over the whole job table, so it is recounted in the background, never by a request
    that already has a snapshot to show: a stale snapshot is served while one recount
    runs. Recounts start at most every ``max_age`` seconds, and never more often than
    every three times the last recount's duration, so a slow count on a big table takes at
    most a third of one connection's time. Only the very first request waits."""

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


def run_bulk(queue: Queue, action: str, name: str | None, state: str, expected: int) -> int:
    """Apply ``action`` to at most ``expected`` jobs of ``state`` (in ``name`` or every
    queue), :data:`BULK_BATCH` rows per statement; return how many changed."""
    if expected < 0:
        raise ValueError("count must not be negative")
    done = 0
    while done < expected:
        limit = min(BULK_BATCH, expected - done)
        if action == "retry":
            n = queue.retry_many(name, states=[state], limit=limit, extra_attempts=1)
        elif action == "cancel":
            n = queue.cancel_many(name, states=[state], limit=limit)
        else:
            n = queue.prune(0, limit=limit, states=[state], queue=name)
        done += n
        if n == 0:
            break
    return done


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
        if w.host == here and not _process_exists(w.pid):
            status = f"gone: process {w.pid} no longer runs on this host"
        elif seen is not None and age > 0.5 * (age + seen.expires_in_s):
            status = (f"stale: no heartbeat for {age:.0f} s; listed until its row "
                      f"expires in {seen.expires_in_s:.0f} s")
        rows.append({"w": w, "running": None if seen is None else seen.running,
                     "status": status})
    return rows


def _process_exists(pid: int) -> bool:
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


# ---- formatting -----------------------------------------------------------------------

def _when(value: datetime | str | None) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return value
    else:
        when = value
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + " UTC"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _compact(payload: Any, width: int = 100) -> str:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[:width - 1] + "…"


def chart_svg(values: list[int], dead: list[int] | None = None) -> dict[str, Any]:
    """Bar geometry of a per-minute series for the SVG of overview.html (and app.js)."""
    top = max(values, default=0) or 1
    bars = []
    for i, v in enumerate(values):
        h = 0 if v == 0 else max(1.0, 30 * v / top)
        d = 0.0 if not dead or not dead[i] else max(1.0, 30 * dead[i] / top)
        bars.append({"x": i * 3, "h": round(h, 1), "d": round(min(d, h), 1), "v": v})
    return {"bars": bars, "top": top}


def job_live(record: JobRecord) -> dict[str, Any]:
    """The fields of a job that change while it runs (``/api/jobs/ID``, JSON-ready)."""
    return {"id": record.id, "state": record.state,
            "attempts": record.attempts, "max_attempts": record.max_attempts,
            "worker_id": record.worker_id, "progress": record.progress,
            "progress_note": record.progress_note,
            "progress_at": None if record.progress_at is None else
            record.progress_at.isoformat(),
            "progress_text": record.progress_text()}
