"""The dashboard's defences, tried as an attacker would with a raw HTTP client (httpx and
raw sockets) against the real ``portq dashboard`` server, and through Starlette's test
client where a failure has to be provoked: DNS rebinding (Host check), cross-site POSTs
(Origin and Sec-Fetch-Site), request body limits, bad forms, a database outage, login
throttling, weak tokens, session expiry and logout."""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Iterable, Iterator

import pytest

pytest.importorskip("starlette", reason="the dashboard needs portq[web]")
httpx = pytest.importorskip("httpx", reason="these tests speak HTTP with httpx")

from starlette.testclient import TestClient  # noqa: E402
from webdata import CSRF, dashboard, failed_twice  # noqa: E402

import portq  # noqa: E402
from portq.conformance.helpers import free_port, run_portq  # noqa: E402
from portq.conformance.plugin import TEST_PREFIX  # noqa: E402
from portq.web import app as web_app  # noqa: E402
from portq.web.gate import SECURITY_HEADERS  # noqa: E402
from portq.web.security import SESSION_COOKIE  # noqa: E402

TOKEN = "t0ken-for-the-dashboard-tests"
EVIL_HOST = "rebind.evil.example"


@pytest.fixture(scope="module")
def server(engine_url: str) -> Iterator[str]:
    with dashboard(engine_url, "--allowed-host", "dash.example.net") as base:
        yield base


def _session(base: str) -> tuple[httpx.Client, str]:
    """A client holding a session cookie, and that session's CSRF token."""
    client = httpx.Client(base_url=base, follow_redirects=False, timeout=30)
    match = CSRF.search(client.get("/").text)
    assert match
    return client, match.group(1)


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def test_a_rebound_host_name_gets_no_page_and_no_token(server: str, queue: portq.Queue,
                                                       qname: str) -> None:
    job_id = failed_twice(queue, qname)
    client, csrf = _session(server)
    port = _port(server)
    for path in ("/", f"/jobs/{job_id}", "/api/overview", "/jobs", "/login"):
        r = client.get(path, headers={"Host": f"{EVIL_HOST}:{port}"})
        assert r.status_code == 421, path
        assert not CSRF.search(r.text) or 'content=""' in r.text, "a CSRF token leaked"
        assert "charge card" not in r.text
        assert r.headers["content-security-policy"] == \
            SECURITY_HEADERS["Content-Security-Policy"]
    r = client.post(f"/jobs/{job_id}/retry", data={"csrf": csrf},
                    headers={"Host": f"{EVIL_HOST}:{port}",
                             "Origin": f"http://{EVIL_HOST}:{port}"})
    assert r.status_code == 421
    assert queue.job(job_id).state == "dead"  # type: ignore[union-attr]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"dash.example.net:{port}",
                 f"DASH.example.net:{port}"):
        assert client.get(f"/jobs/{job_id}", headers={"Host": host}).status_code == 200, host
    for host in (f"127.0.0.1.{EVIL_HOST}:{port}", f"localhost.{EVIL_HOST}", "",
                 f"evil.dash.example.net:{port}", f"localhost:{port}x"):
        assert client.get("/", headers={"Host": host}).status_code in (400, 421), host


def test_a_post_from_another_origin_is_refused(server: str, queue: portq.Queue,
                                               qname: str) -> None:
    job_id = failed_twice(queue, qname)
    client, csrf = _session(server)
    port = _port(server)
    refused = [
        {"Origin": f"http://{EVIL_HOST}:{port}"},
        {"Origin": "null"},
        {"Origin": f"http://127.0.0.1:{port + 1}"},           # another local app
        {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ]
    for headers in refused:
        r = client.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}, headers=headers)
        assert r.status_code == 403, headers
        assert "another" in r.text
    assert queue.job(job_id).state == "dead"  # type: ignore[union-attr]
    # a cross-site fetch or embedding of a page is refused; a link followed is not
    r = client.get(f"/jobs/{job_id}", headers={"Sec-Fetch-Site": "cross-site",
                                               "Sec-Fetch-Mode": "cors"})
    assert r.status_code == 403
    r = client.get(f"/jobs/{job_id}", headers={"Sec-Fetch-Site": "cross-site",
                                               "Sec-Fetch-Mode": "navigate"})
    assert r.status_code == 200
    r = client.post(f"/jobs/{job_id}/retry", data={"csrf": csrf},
                    headers={"Origin": f"http://127.0.0.1:{port}",
                             "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 303
    assert queue.job(job_id).state == "ready"  # type: ignore[union-attr]


def _raw(port: int, request: bytes, *, body_chunks: Iterable[bytes] = ()) -> bytes:
    """Send ``request`` (then ``body_chunks`` while the server reads) and return the
    response's first bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except OSError:
            pass  # the server answered and closed before the whole body was sent
        return sock.recv(65536)


def test_oversized_bodies_get_413_before_they_are_read(server: str) -> None:
    port = _port(server)
    started = time.monotonic()
    head = _raw(port, b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      b"application/x-www-form-urlencoded\r\nContent-Length: 314572800\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert time.monotonic() - started < 10, "the server waited for the 300 MB body"

    def chunks() -> Iterator[bytes]:  # chunked: no Content-Length to check up front
        piece = b"a" * 65536
        for _ in range(48):  # 3 MiB
            yield b"%x\r\n%s\r\n" % (len(piece), piece)
        yield b"0\r\n\r\n"
    head = _raw(port, b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: "
                      b"chunked\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n",
                body_chunks=chunks())
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert b"x-content-type-options: nosniff" in head.lower()
    assert httpx.get(server + "/", timeout=30).status_code == 200, "the server is down"


def test_too_many_form_fields_is_a_400_with_every_security_header(server: str) -> None:
    client, csrf = _session(server)
    fields = {f"f{i}": "x" for i in range(30)} | {"csrf": csrf}
    r = client.post("/bulk", data=fields)
    assert r.status_code == 400 and "more than 20 fields" in r.text
    assert "Traceback" not in r.text
    for name, value in SECURITY_HEADERS.items():
        assert r.headers[name] == value, name


def test_a_database_outage_is_a_503_page_and_one_log_line(
        engine_url: str, caplog: pytest.LogCaptureFixture, tmp_path: object) -> None:
    if engine_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path}/missing-dir/none.db"
    else:
        scheme = engine_url.split("://", 1)[0]
        url = f"{scheme}://root@127.0.0.1:{free_port()}/gone"   # nothing listens there
    with portq.connect(url) as q, \
            TestClient(web_app(q), base_url="http://127.0.0.1") as c:
        csrf = CSRF.search(c.get("/login").text)
        assert csrf
        for method, path in (("GET", "/"), ("GET", "/jobs"), ("GET", "/jobs/1"),
                             ("GET", "/api/overview"), ("POST", "/jobs/1/retry")):
            caplog.clear()
            with caplog.at_level(logging.INFO):
                r = c.request(method, path, data={"csrf": csrf.group(1)}
                              if method == "POST" else None)
            assert r.status_code == 503, (path, r.status_code, r.text[:300])
            assert "cannot reach its database" in r.text and "Traceback" not in r.text
            assert r.headers["retry-after"] == "5"
            assert r.headers["x-frame-options"] == "DENY"
            lines = [rec for rec in caplog.records if rec.name.startswith("portq")]
            assert len(lines) == 1 and "\n" not in lines[0].getMessage(), lines
            assert lines[0].exc_info is None


def test_an_unexpected_failure_is_a_500_page_with_the_headers(
        queue: portq.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")
    monkeypatch.setattr(queue, "workers", broken)
    with TestClient(web_app(queue), base_url="http://127.0.0.1",
                    raise_server_exceptions=False) as c:
        r = c.get("/workers")
        assert r.status_code == 500 and "Internal error" in r.text and "boom" not in r.text
        for name, value in SECURITY_HEADERS.items():
            assert r.headers[name] == value, name


def test_failed_logins_are_logged_and_throttled(queue: portq.Queue,
                                                caplog: pytest.LogCaptureFixture) -> None:
    with TestClient(web_app(queue, token=TOKEN), base_url="http://127.0.0.1",
                    follow_redirects=False) as c:
        csrf = CSRF.search(c.get("/login").text)
        assert csrf
        with caplog.at_level(logging.WARNING, logger="portq.web"):
            for _ in range(5):
                r = c.post("/login", data={"csrf": csrf.group(1), "token": "wrong" * 4})
                assert r.status_code == 403
            failures = [r for r in caplog.records if "login_failed" in r.getMessage()]
            assert len(failures) == 5 and "failures_last_minute=5" in failures[-1].getMessage()
            assert all("wrong" not in r.getMessage() for r in caplog.records)
            r = c.post("/login", data={"csrf": csrf.group(1), "token": TOKEN})
            assert r.status_code == 429, "the right token after 5 failures must wait"
            assert int(r.headers["retry-after"]) > 0 and "Too many failed logins" in r.text
            assert any("login_throttled" in r.getMessage() for r in caplog.records)
        assert c.get("/").status_code == 303


@pytest.mark.parametrize("weak", ["a" * 16, "abababababababab", "abcdefghijklmnopqrst",
                                  "0123456789abcdefgh"[:16], "short"])
def test_low_entropy_tokens_are_refused(queue: portq.Queue, weak: str) -> None:
    with pytest.raises(portq.ConfigurationError, match="token"):
        web_app(queue, token=weak)


def test_a_weak_token_stops_portq_dashboard_with_one_line(engine_url: str) -> None:
    proc = run_portq("dashboard", engine_url, "--port", str(free_port()), check=False,
                     env={"PORTQ_DASHBOARD_TOKEN": "x" * 20})
    assert proc.returncode == 2 and "too easy to guess" in proc.stderr
    assert "Traceback" not in proc.stderr


def _login(c: TestClient) -> str:
    csrf = CSRF.search(c.get("/login").text)
    assert csrf
    r = c.post("/login", data={"csrf": csrf.group(1), "token": TOKEN})
    assert r.status_code == 303
    return str(c.cookies.get(SESSION_COOKIE))


def test_sessions_expire_and_logout_ends_them(queue: portq.Queue) -> None:
    with TestClient(web_app(queue, token=TOKEN, session_seconds=1.0),
                    base_url="http://127.0.0.1", follow_redirects=False) as c:
        _login(c)
        assert c.get("/").status_code == 200
        time.sleep(2.1)
        assert c.get("/").status_code == 303, "an expired session still works"
    with TestClient(web_app(queue, token=TOKEN), base_url="http://127.0.0.1",
                    follow_redirects=False) as c:
        cookie = _login(c)
        page = c.get("/").text
        assert 'id="logout"' in page
        csrf = CSRF.search(page)
        assert csrf
        r = c.post("/logout", data={"csrf": csrf.group(1)})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert c.get("/").status_code == 303
        c.cookies.set(SESSION_COOKIE, cookie)   # the old cookie, replayed
        assert c.get("/").status_code == 303, "a logged-out session still works"
        assert c.get("/api/overview").status_code == 401


def test_static_assets_set_no_cookie(server: str) -> None:
    r = httpx.get(server + "/static/app.css", timeout=30)
    assert r.status_code == 200 and "set-cookie" not in r.headers
    assert r.headers["x-content-type-options"] == "nosniff"
    cookie = httpx.get(server + "/", timeout=30).headers["set-cookie"]
    assert re.search(r"[Pp]ath=/(;|$)", cookie) and "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()


def test_a_port_in_use_is_one_line_and_exit_2(engine_url: str, server: str) -> None:
    proc = run_portq("dashboard", engine_url, "--prefix", TEST_PREFIX, "--port",
                     str(_port(server)), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "port is in use" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_behind_a_proxy_that_rewrites_host_the_allowed_origin_may_post(
        server: str, queue: portq.Queue, qname: str) -> None:
    """nginx's default forwards Host as the upstream (127.0.0.1:port) while the browser's
    Origin is the public name: an --allowed-host name is accepted as the Origin, another
    name still is not."""
    job_id = failed_twice(queue, qname)
    client, csrf = _session(server)
    evil = client.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}, headers={
        "Origin": "https://evil.example.net", "Sec-Fetch-Site": "same-origin"})
    assert evil.status_code == 403
    ok = client.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}, headers={
        "Origin": "https://dash.example.net", "Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 303
    assert queue.job(job_id).state == "ready"  # type: ignore[union-attr]
