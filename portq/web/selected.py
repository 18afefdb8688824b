"""Actions on the jobs an operator ticked on the Jobs page: a confirmation page (GET, the
ids in the URL) and the action itself (POST + CSRF), applied job by job with portq's own
guarded operations, so a job no longer in a state that allows it is left as it is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from portq.queue import Queue

#: at most this many jobs per selection (the Jobs page shows 50)
MAX_SELECTED = 100
SELECT_ACTIONS = {"retry": "Retry", "cancel": "Cancel", "delete": "Delete"}
Render = Callable[..., Response]
Guarded = Callable[..., Awaitable[Response]]


def selected_ids(values: list[str]) -> list[int]:
    """The distinct positive job ids of ``values``, in their order; ValueError otherwise."""
    ids: list[int] = []
    for value in values:
        if not value.isdigit() or not 0 < int(value) < 2**63:
            raise ValueError(f"{value[:20]!r} is not a job id")
        if int(value) not in ids:
            ids.append(int(value))
    if not ids or len(ids) > MAX_SELECTED:
        raise ValueError(f"select from 1 to {MAX_SELECTED} jobs")
    return ids


def apply(queue: Queue, action: str, ids: list[int]) -> int:
    """Apply ``action`` to each job; return how many changed."""
    do: Callable[[int], Any] = {
        "retry": lambda i: queue.retry_dead(i, extra_attempts=1),
        "cancel": queue.cancel, "delete": queue.delete_finished}[action]
    return sum(1 for job_id in ids if do(job_id))


def selected_routes(queue: Queue, render: Render, guarded: Guarded, read_only: bool,
                    refuse: Callable[[Request, int, str], Response]) -> list[Route]:
    def confirm(request: Request) -> Response:
        if read_only:
            return refuse(request, 403, "This dashboard is read-only.")
        action = request.query_params.get("action", "")
        if action not in SELECT_ACTIONS:
            return refuse(request, 400, "Choose retry, cancel or delete for the selected "
                                        "jobs.")
        try:
            ids = selected_ids(request.query_params.getlist("id"))
        except ValueError as exc:
            return refuse(request, 400, f"Nothing to do: {exc}.")
        return render(request, "selected_confirm.html", action=action,
                      label=SELECT_ACTIONS[action], ids=ids,
                      back=request.query_params.get("back", ""))

    async def act(request: Request) -> Response:
        base = request.scope.get("root_path", "")

        def run(form: Any) -> Response:
            action = form.get("action", "")
            if action not in SELECT_ACTIONS:
                return refuse(request, 400, "No such action.")
            try:
                ids = selected_ids(form.lists.get("id", []))
            except ValueError as exc:
                return refuse(request, 400, f"Nothing to do: {exc}.")
            changed = apply(queue, action, ids)
            query = {k: v for k, v in parse_qsl(form.get("back", ""))
                     if k in ("queue", "state", "order")}
            query.update(done="selected", count=str(changed),
                         skipped=str(len(ids) - changed))
            return RedirectResponse(f"{base}/jobs?{urlencode(query)}", status_code=303)
        return await guarded(request, run, MAX_SELECTED + 5)

    return [Route("/selected", confirm), Route("/selected", act, methods=["POST"])]
