"""What every dashboard route reads: the :class:`Dashboard` (the queue, the settings, the
session guard, the templates) stored on the Starlette app, and the template filters.

Routes are plain module functions (``portq.web.pages``, ``portq.web.actions``) that find
their dashboard with :func:`dashboard_of`, so each can be called in a test with an app
built by :func:`portq.web.application.build` and nothing else.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from portq.job import error_line
from portq.queue import Queue
from portq.web.queues import limits_text
from portq.web.security import Guard

HERE = Path(__file__).resolve().parent
#: payload searches (a scan of the payloads) that may run at once: the others are told to
#: try again, so that searches never hold every pooled connection and job pages still load
SEARCHES_AT_ONCE = 2
CHART_WIDTH = 240        # the Throughput page's bars (px)


@dataclass(frozen=True)
class Settings:
    read_only: bool
    poll_seconds: float
    database: str


@dataclass
class Dashboard:
    """One dashboard instance: its queue, settings, session guard and templates."""

    queue: Queue
    settings: Settings
    guard: Guard
    env: Environment = field(default_factory=lambda: templates())
    searches: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(SEARCHES_AT_ONCE))
    #: per-purpose caches of page data (the overview's snapshot, the charts' windows)
    caches: dict[str, Any] = field(default_factory=dict)

    def render(self, request: Request, template: str, status: int = 200,
               **ctx: Any) -> Response:
        """A template rendered with the page's common context (base path, CSRF token)."""
        html = self.env.get_template(template).render(
            base=request.scope.get("root_path", ""), settings=self.settings,
            csrf=self.guard.csrf_token(request.state.session_id), path=request.url.path,
            logged_in=self.guard.needs_login, **ctx)
        return HTMLResponse(html, status_code=status)

    def refuse(self, request: Request, status: int, message: str) -> Response:
        """The "Refused" page with ``status`` and a one-line reason."""
        return self.render(request, "message.html", status=status, title="Refused",
                           message=message)

    def error_page(self, base: str, status: int, title: str, message: str) -> str:
        """An error page for the gate (no session: no CSRF token, no logout button)."""
        return self.env.get_template("message.html").render(
            base=base, settings=self.settings, csrf="", path="", logged_in=False,
            title=title, message=message, status=status)


def dashboard_of(request: Request) -> Dashboard:
    """The dashboard serving ``request`` (set on the app by ``build``)."""
    dash: Dashboard = request.app.state.portq
    return dash


def database_label(queue: Queue) -> str:
    """Engine, host and database name: never a user name, password or URL option."""
    url = queue.backend.url
    if url.engine == "sqlite":
        return f"sqlite · {os.path.basename(url.path)}"
    where = unquote(url.netloc_hosts)  # a Unix socket directory as a path
    return f"{url.engine} · {where}/{url.database or ''}"


def templates() -> Environment:
    """The Jinja2 environment of the dashboard's templates (autoescaped) and filters."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(["html"], default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = when_text
    env.filters["age"] = age_text
    env.filters["compact"] = compact
    env.filters["error_line"] = error_line
    env.filters["limits"] = limits_text
    env.globals["chart"] = chart_svg
    env.filters["ms"] = ms_text
    env.globals["series"] = series_svg
    return env


def when_text(value: datetime | str | None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS UTC``; ``-`` for none."""
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


def age_text(seconds: float | None) -> str:
    """A duration in the largest unit that keeps it readable (s, min, h, d)."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def compact(payload: Any, width: int = 100) -> str:
    """A payload's JSON on one line, cut to ``width`` characters."""
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


def series_svg(succeeded: list[int], dead: list[int], bucket_s: int,
               width: int = CHART_WIDTH) -> dict[str, Any]:
    """Bar geometry of a window's series (oldest bucket first): each bar the succeeded and
    dead jobs of its bucket, the dead part drawn over it; a title says when."""
    totals = [s + d for s, d in zip(succeeded, dead, strict=True)]
    top = max(totals, default=0) or 1
    step = width / max(len(totals), 1)
    bars = []
    for i, v in enumerate(totals):
        if not v:
            continue
        h = max(1.0, 30 * v / top)
        d = 0.0 if not dead[i] else min(h, max(1.0, 30 * dead[i] / top))
        bars.append({"x": round(i * step, 2), "w": round(step * 0.8, 2), "h": round(h, 1),
                     "d": round(d, 1), "v": v, "dead": dead[i],
                     "ago": ago_text((len(totals) - 1 - i) * bucket_s)})
    return {"bars": bars, "top": top, "width": width}


def ago_text(seconds: int) -> str:
    """When a bucket began, in words (``now``, ``15 min ago``, ``3 h ago``)."""
    if seconds <= 0:
        return "this bucket"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:g} h ago"
    return f"{seconds / 86400:.1f} d ago"


def ms_text(ms: float | None) -> str:
    """A duration in ms as the page shows it: ``-``, ``35 ms``, else as :func:`age_text`."""
    if ms is None:
        return "-"
    return f"{ms:.0f} ms" if ms < 1000 else age_text(ms / 1000)
