"""The dashboard's modules one by one (issue 28: app, pages, actions, security importable
and testable alone): a route function called with a bare request on a built app, the form
parser, the bulk runner, the chart geometry, the session middleware's cookie."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the dashboard needs portq[web]")

from starlette.requests import Request

import portq
from portq.web import actions, charts, context, pages
from portq.web import app as web_app
from portq.web.gate import BadRequest


@pytest.fixture
def sqlite_queue(tmp_path: Path) -> Any:
    queue = portq.connect(f"sqlite:///{tmp_path / 'units.db'}")
    queue.migrate()
    yield queue
    queue.close()


def _request(app: Any, path: str, **path_params: Any) -> Request:
    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"",
             "headers": [], "app": app, "path_params": path_params, "root_path": "",
             "state": {"session_id": "s" * 24}}
    return Request(scope)


def test_a_page_function_runs_on_a_bare_request(sqlite_queue: Any) -> None:
    app = web_app(sqlite_queue)
    dash = context.dashboard_of(_request(app, "/"))
    assert dash.queue is sqlite_queue and dash.settings.database.startswith("sqlite · ")
    job_id = sqlite_queue.enqueue("units", {"n": 1})
    found = pages.job_api(_request(app, f"/api/jobs/{job_id}", job_id=job_id))
    assert json.loads(bytes(found.body))["state"] == "ready"
    missing = pages.job_api(_request(app, "/api/jobs/99999", job_id=99999))
    assert missing.status_code == 404
    html = pages.job(_request(app, f"/jobs/{job_id}", job_id=job_id))
    assert html.status_code == 200 and b"&#34;n&#34;: 1" in bytes(html.body)


def test_forms_bulk_runs_and_filters(sqlite_queue: Any) -> None:
    form = actions.parse_form(b"csrf=x&id=1&id=2", 5)
    assert form["csrf"] == "x" and form.lists["id"] == ["1", "2"]
    with pytest.raises(BadRequest) as too_many:
        actions.parse_form(b"&".join(b"f%d=1" % i for i in range(6)), 5)
    assert too_many.value.status == 400
    sqlite_queue.enqueue_many([{"queue": "units", "payload": i} for i in range(7)])
    assert actions.run_bulk(sqlite_queue, "cancel", "units", "ready", 5) == 5
    assert actions.run_bulk(sqlite_queue, "cancel", "units", "ready", 9) == 2
    f = pages.JobFilter.from_query({"queue": "units", "state": "dead", "after": "x1"})
    assert f.after_id == 0 and f.query(after="7") == "queue=units&state=dead&after=7"


def test_chart_geometry_and_texts() -> None:
    c = context.series_svg([0, 4, 2], [0, 1, 0], 900, width=30)
    assert [b["x"] for b in c["bars"]] == [10.0, 20.0] and c["top"] == 5
    assert c["bars"][0]["ago"] == "15 min ago" and c["bars"][1]["ago"] == "this bucket"
    assert context.ms_text(None) == "-" and context.ms_text(4200) == "4.2 s"
    assert charts.REFRESH_S["7d"] == 300.0
