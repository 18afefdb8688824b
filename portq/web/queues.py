"""The dashboard's queue page: a queue's counts, whether it is paused, its running and rate
limits, and (unless read-only) pause, resume and limit controls. Each control shows a
confirmation page first; the change itself is a POST carrying the session's CSRF token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from portq.errors import ConfigurationError
from portq.queue import Queue, validate_queue
from portq.rates import parse_rate, period_text

Render = Callable[..., Response]
Guarded = Callable[[Request, Callable[[dict[str, str]], Response]], Awaitable[Response]]
KEYS_SHOWN = 20   # per-key limits in use listed on a queue's page
QUEUE_ACTIONS = {"pause": "Pause", "resume": "Resume", "limit": "Set the limits of"}
QUEUE_NOTICES = {"paused": "Queue paused: workers claim none of its jobs from their next "
                           "poll; running jobs finish.",
                 "resumed": "Queue resumed: workers claim its jobs again.",
                 "limited": "Limits saved: workers see them within a second."}


def limits_text(stats: dict[str, Any]) -> list[str]:
    """What limits a queue (the overview's and queue page's words)."""
    shown = []
    if stats.get("concurrency_limit"):
        shown.append(f"≤ {stats['concurrency_limit']} running")
    if stats.get("rate_limit"):
        shown.append(f"{stats['rate_limit']} / {period_text(stats.get('rate_period_s'))}")
    return shown


def _limits(form: dict[str, str]) -> tuple[int | None, tuple[int, float] | None]:
    """``running`` (blank: no limit) and ``rate`` (blank: no limit) of a limit form."""
    running_text = form.get("running", "").strip()
    running = None
    if running_text:
        if not running_text.isdigit() or not 0 < int(running_text) < 2**31:
            raise ConfigurationError(f"running limit {running_text!r} must be a whole "
                                     "number from 1, or blank for none")
        running = int(running_text)
    rate_text = form.get("rate", "").strip()
    return running, parse_rate(rate_text) if rate_text else None


def queue_routes(queue: Queue, render: Render, guarded: Guarded, read_only: bool,
                 refuse: Callable[[Request, int, str], Response]) -> list[Route]:
    def page(request: Request) -> Response:
        name = validate_queue(request.path_params["name"])
        rows = [s.as_dict() for s in queue.stats(name)]
        done = request.query_params.get("done", "")
        stats = rows[0] if rows else None
        rate = None if not stats or not stats["rate_limit"] else \
            f"{stats['rate_limit']}/{period_text(stats['rate_period_s'])}"
        return render(request, "queue.html", name=name, stats=stats, rate=rate,
                      key_limits=queue.key_limits(name, limit=KEYS_SHOWN),
                      controls=not read_only, notice=QUEUE_NOTICES.get(done))

    def confirm(request: Request) -> Response:
        if read_only:
            return refuse(request, 403, "This dashboard is read-only.")
        name = validate_queue(request.path_params["name"])
        action = request.query_params.get("action", "")
        if action not in QUEUE_ACTIONS:
            return refuse(request, 400, "No such queue action.")
        form = {k: request.query_params.get(k, "") for k in ("running", "rate")}
        running, rate = _limits(form) if action == "limit" else (None, None)
        return render(request, "queue_confirm.html", name=name, action=action,
                      label=QUEUE_ACTIONS[action], running=running,
                      rate=None if rate is None else f"{rate[0]} / {period_text(rate[1])}",
                      form=form)

    async def act(request: Request) -> Response:
        base = request.scope.get("root_path", "")
        name = validate_queue(request.path_params["name"])
        action = request.path_params["action"]

        def run(form: dict[str, str]) -> Response:
            if action == "pause":
                queue.pause(name)
            elif action == "resume":
                queue.resume(name)
            elif action == "limit":
                running, rate = _limits(form)
                queue.set_concurrency_limit(name, running)
                queue.set_rate_limit(name, *(rate or (None,)))
            else:
                return refuse(request, 404, "No such queue action.")
            done = {"pause": "paused", "resume": "resumed", "limit": "limited"}[action]
            return RedirectResponse(f"{base}/queues/{quote(name, safe='')}?"
                                    f"{urlencode({'done': done})}", status_code=303)
        return await guarded(request, run)

    return [Route("/queues/{name:str}", page),
            Route("/queues/{name:str}/confirm", confirm),
            Route("/queues/{name:str}/{action:str}", act, methods=["POST"])]
