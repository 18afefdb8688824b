"""The dashboard's Starlette app (``portq.web.app()`` calls :func:`build`): its routes
(``pages``, ``actions``, ``queues``, ``selected``) and its two layers of middleware
(``gate.Gate`` outside, then ``security.Sessions``), around one
:class:`~portq.web.context.Dashboard`.

GET never changes state; every action is a POST carrying the session's CSRF token, and
is refused (403) in read-only mode. All user data (payloads, keys, queue names, errors,
worker ids) reaches the page through Jinja2's autoescaping or, for live updates, through
``textContent`` in app.js; the Content-Security-Policy allows no inline script at all.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from portq.queue import Queue
from portq.web import actions, charts, pages
from portq.web.context import HERE, Dashboard, Settings, database_label
from portq.web.gate import Gate
from portq.web.queues import queue_routes
from portq.web.security import Guard, Sessions
from portq.web.selected import selected_routes


def build(queue: Queue, *, read_only: bool, token: str | None, poll_seconds: float,
          allowed_hosts: frozenset[str] | None, max_body: int,
          trusted_origins: frozenset[str],
          session_seconds: float) -> Starlette:
    """The dashboard app over ``queue`` (``portq.web.app`` checks the options first)."""
    guard = Guard(token, session_seconds)
    settings = Settings(read_only=read_only, poll_seconds=max(1.0, float(poll_seconds)),
                        database=database_label(queue))
    dash = Dashboard(queue=queue, settings=settings, guard=guard)
    routes = [
        *pages.routes(),
        *charts.routes(),
        *actions.routes(),
        *queue_routes(queue, dash.render, actions.guarded, read_only, dash.refuse),
        *selected_routes(queue, dash.render, actions.guarded, read_only, dash.refuse),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[
        Middleware(Gate, allowed_hosts=allowed_hosts, max_body=max_body,
                   trusted_origins=trusted_origins, error_page=dash.error_page),
        Middleware(Sessions, guard=guard)])
    app.state.portq = dash
    return app
