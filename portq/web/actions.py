"""The dashboard's actions: every change is a POST carrying the session's CSRF token, is
refused (403) in read-only mode, and runs in a thread (portq's API blocks). Job actions,
bulk actions, login and logout."""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import parse_qs, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from portq.errors import PortqError
from portq.queue import Queue
from portq.web.context import dashboard_of
from portq.web.gate import BadRequest
from portq.web.security import SESSION_COOKIE, set_session

log = logging.getLogger("portq.web")
BULK_BATCH = 500          # rows per statement of a bulk action
MAX_FORM_FIELDS = 20
# what each action does, and the states it applies to
ACTIONS = {
    "retry": ("Retry", ("dead", "cancelled")),
    "cancel": ("Cancel", ("ready", "running")),
    "delete": ("Delete", ("succeeded", "dead", "cancelled")),
}


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


async def guarded(request: Request, act: Callable[[Form], Response],
                  max_fields: int = MAX_FORM_FIELDS) -> Response:
    """Run ``act`` on the posted form when its CSRF token is right and the dashboard is
    not read-only; the refusal page otherwise."""
    dash = dashboard_of(request)
    form = parse_form(await request.body(), max_fields)
    if not dash.guard.csrf_ok(request.state.session_id, form.get("csrf")):
        return dash.refuse(request, 403, "Missing or wrong CSRF token: reload the page "
                                         "and try again.")
    if dash.settings.read_only:
        return dash.refuse(request, 403, "This dashboard is read-only.")
    return await run_in_threadpool(act, form)


async def job_action(request: Request) -> Response:
    dash = dashboard_of(request)
    queue = dash.queue
    job_id, action = request.path_params["job_id"], request.path_params["action"]
    base = request.scope.get("root_path", "")

    def act(form: Form) -> Response:
        if action not in ACTIONS or not 0 < job_id < 2**63:
            return dash.refuse(request, 404, "No such action.")
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
    dash = dashboard_of(request)
    base = request.scope.get("root_path", "")

    def act(form: Form) -> Response:
        action, state = form.get("action", ""), form.get("state", "")
        name = form.get("queue") or None
        if action not in ACTIONS or state not in ACTIONS[action][1]:
            return dash.refuse(request, 400,
                               "That bulk action does not apply to that state.")
        try:
            expected = int(form.get("count", ""))
            touched = run_bulk(dash.queue, action, name, state, expected)
        except (ValueError, PortqError) as exc:
            return dash.refuse(request, 400, f"Bulk action refused: {exc}")
        query = urlencode({k: v for k, v in (("queue", name), ("state", state),
                                             ("done", "bulk"), ("count", touched)) if v})
        return RedirectResponse(f"{base}/jobs?{query}", status_code=303)
    return await guarded(request, act)


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


# ---- login (only with a token) and logout ---------------------------------------------

def login_page(request: Request) -> Response:
    return dashboard_of(request).render(request, "login.html", failed=False)


async def login(request: Request) -> Response:
    dash = dashboard_of(request)
    guard = dash.guard
    form = parse_form(await request.body(), 5)
    if not guard.csrf_ok(request.state.session_id, form.get("csrf")):
        return dash.refuse(request, 403, "Missing or wrong CSRF token: reload the page.")
    client = request.client.host if request.client else "-"
    wait = guard.throttle.retry_after(client)
    if wait > 0:
        log.warning("dashboard.login_throttled client=%s retry_after_s=%.0f", client, wait)
        response = dash.render(request, "login.html", status=429, failed=False,
                               wait=max(1, round(wait)))
        response.headers["Retry-After"] = str(max(1, round(wait)))
        return response
    if not guard.needs_login or not guard.token_matches(form.get("token", "")):
        failures = guard.throttle.failed(client)
        log.warning("dashboard.login_failed client=%s failures_last_minute=%d",
                    client, failures)
        return dash.render(request, "login.html", status=403, failed=True)
    response = RedirectResponse(request.scope.get("root_path", "") + "/", status_code=303)
    set_session(request, response, guard.new_session(authenticated=True))
    return response


async def logout(request: Request) -> Response:
    dash = dashboard_of(request)
    form = parse_form(await request.body(), 5)
    if not dash.guard.csrf_ok(request.state.session_id, form.get("csrf")):
        return dash.refuse(request, 403, "Missing or wrong CSRF token: reload the page.")
    dash.guard.revoke(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse(request.scope.get("root_path", "") + "/login",
                                status_code=303)
    set_session(request, response, dash.guard.new_session(authenticated=False))
    return response


def routes() -> list[Route]:
    """The action routes (POST), and the login page."""
    return [Route("/jobs/{job_id:int}/{action:str}", job_action, methods=["POST"]),
            Route("/bulk", bulk_action, methods=["POST"]),
            Route("/login", login_page),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"])]
