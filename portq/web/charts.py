"""The dashboard's Throughput page: per queue, the jobs finished over the last hour, day or
week (bars: succeeded and dead per bucket), the failure rate, and wait (enqueue -> start)
and run time percentiles, from :meth:`portq.Queue.job_stats`.

Each window's data is one shared :class:`~portq.web.pages.Snapshot`, recounted in the
background at most every ``REFRESH_S[window]`` seconds (and never more often than three
times its last recount's duration), however many browsers poll it: a 7-day window reads a
week of finished jobs at most every five minutes. The page refreshes itself like the Jobs
list (app.js fetches the same URL and swaps ``#throughput``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from portq.stats import WINDOWS
from portq.web.context import CHART_WIDTH, Dashboard, dashboard_of
from portq.web.pages import Snapshot

#: the longest a window's data is served before a recount starts (the 1 h window follows
#: the dashboard's poll interval)
REFRESH_S = {"1h": 0.0, "24h": 60.0, "7d": 300.0}


def window_of(request: Request) -> str:
    """The page's window (``?window=``), 1 h unless it names another one offered."""
    window = request.query_params.get("window", "1h")
    return window if window in WINDOWS else "1h"


def snapshot_for(dash: Dashboard, window: str) -> Snapshot:
    """The shared snapshot of ``window``'s statistics (made on first use)."""
    key = f"throughput:{window}"
    shot = dash.caches.get(key)
    if shot is None:
        max_age = max(REFRESH_S[window], dash.settings.poll_seconds / 2)
        shot = dash.caches.setdefault(key, Snapshot(
            lambda: throughput_data(dash, window), max_age=max_age))
    assert isinstance(shot, Snapshot)
    return shot


def throughput_data(dash: Dashboard, window: str) -> dict[str, Any]:
    """The JSON of ``/api/throughput?window=``: one entry per queue with finished jobs."""
    rows = [s.as_dict() for s in dash.queue.job_stats(window)]
    return {"window": window, "window_s": WINDOWS[window], "queues": rows,
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds")}


def throughput(request: Request) -> Response:
    dash = dashboard_of(request)
    window = window_of(request)
    data = snapshot_for(dash, window).get()
    return dash.render(request, "throughput.html", data=data, window=window,
                       windows=list(WINDOWS), live="throughput", width=CHART_WIDTH)


def throughput_api(request: Request) -> Response:
    window = window_of(request)
    return JSONResponse(snapshot_for(dashboard_of(request), window).get())


def routes() -> list[Route]:
    return [Route("/throughput", throughput), Route("/api/throughput", throughput_api)]
