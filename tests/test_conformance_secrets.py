"""``portq conformance URL`` with a password in the URL, as users run it: the password
appears nowhere in what it prints (the report table, failure reasons, ``--json``) nor in
its JUnit report (captured output and logs, tracebacks), in any form it takes in the URL."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import portq
from portq.conformance.helpers import run_portq
from portq.conformance.test_first_contact import with_credentials
from portq.url import parse_url

#: percent-encoded in the URL ("%40", "%25"): both forms must stay hidden
SECRET = "Cf-Pw@" + uuid.uuid4().hex[:10] + "%x"

#: a plugin that leaks the URL every way a test can: print, log, assertion message and
#: traceback locals (one test errors at setup, one fails)
LEAKY_PLUGIN = '''
import logging
import pytest

@pytest.fixture(autouse=True)
def _leak(request):
    if "engine_url" not in request.fixturenames:
        yield
        return
    url = request.getfixturevalue("engine_url")
    print(f"connecting to {url}")
    logging.getLogger("app").warning("using %s", url)
    if request.node.name.startswith("test_committed_enqueue_is_seen_once"):
        assert url == "another URL", f"unexpected URL {url}"
    yield
    if request.node.name.startswith("test_run_at_is_honoured"):
        raise RuntimeError(f"teardown failed for {url!r}")
'''


def _mysql_users(engine_url: str, *statements: str) -> None:
    """Run user-management statements as the URL's (administrative) user; %(user)s,
    %(host)s and %(secret)s are bound, for hosts '%' and 'localhost'."""
    import pymysql
    parsed = parse_url(engine_url)
    conn = pymysql.connect(host=parsed.host, port=parsed.port or 3306,
                           user=parsed.username or "root", password=parsed.password or "")
    try:
        with conn.cursor() as cur:
            for host in ("%", "localhost"):
                for sql in statements:
                    cur.execute(sql, {"user": mysql_user(engine_url), "host": host,
                                      "secret": SECRET})
    finally:
        conn.close()


def mysql_user(engine_url: str) -> str:
    """The test's user, one per database (developers sharing a server never collide)."""
    return "pq_" + (parse_url(engine_url).database or "x")[:28]


@pytest.fixture
def url_with_password(engine_url: str) -> Iterator[str]:
    """A working URL of the engine under test that carries SECRET as its password."""
    parsed = parse_url(engine_url)
    if parsed.engine == "sqlite":
        pytest.skip("SQLite URLs carry no password")
    if parsed.engine != "mysql":
        url = with_credentials(engine_url, password=SECRET)
    else:
        import pymysql
        try:
            _mysql_users(engine_url, "DROP USER IF EXISTS %(user)s@%(host)s",
                         "CREATE USER %(user)s@%(host)s IDENTIFIED BY %(secret)s",
                         f"GRANT ALL ON `{parsed.database}`.* TO %(user)s@%(host)s")
        except pymysql.MySQLError as exc:
            pytest.skip(f"cannot create a MySQL user with a password here: {exc}")
        url = with_credentials(engine_url, user=mysql_user(engine_url), password=SECRET)
    try:
        with portq.connect(url) as q:
            q.backend.schema_version()
    except portq.LoginFailed as exc:
        pytest.skip(f"the server refuses the test password (not trust auth): {exc}")
    yield url
    if parsed.engine == "mysql":
        _mysql_users(engine_url, "DROP USER IF EXISTS %(user)s@%(host)s")


@pytest.mark.slow
def test_conformance_output_never_shows_the_password(url_with_password: str,
                                                     tmp_path: Path) -> None:
    url = url_with_password
    assert parse_url(url).password == SECRET and "%40" in url
    (tmp_path / "leaky_plugin.py").write_text(textwrap.dedent(LEAKY_PLUGIN))
    junit = tmp_path / "report.xml"
    # its own tables: the suite drops them at the end, and portqt_ is this session's
    prefix = f"portqs{uuid.uuid4().hex[:6]}_"
    proc = run_portq("conformance", url, "--prefix", prefix, "--junit", str(junit),
                     "--", "-p", "leaky_plugin",
                     "-o", "junit_logging=all", "-k", "test_enqueue.py",
                     env={"PYTHONPATH": str(tmp_path)}, check=False, timeout=600)
    as_json = run_portq("conformance", url, "--prefix", prefix, "--json",
                        "--", "-p", "leaky_plugin",
                        "-k", "test_enqueue.py", env={"PYTHONPATH": str(tmp_path)},
                        check=False, timeout=600)
    assert proc.returncode == 1 and as_json.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr + junit.read_text() + as_json.stdout + as_json.stderr
    # the planted failures are reported with their messages, the captured leaks are kept
    assert "unexpected URL" in out and "teardown failed for" in out and " passed" in out
    # each says where it failed, read from its scrubbed traceback (the plugin's lines)
    failed = sorted(line for line in out.splitlines() if line.startswith("FAILED "))
    assert [line[-21:] for line in failed] == [" (leaky_plugin.py:14)",
                                               " (leaky_plugin.py:17)"], "\n".join(failed)
    assert "connecting to " in out and "using " in out   # the leaks were printed...
    redacted = parse_url(url).redacted()
    for form in (SECRET, SECRET.replace("@", "%40").replace("%x", "%25x"), "Cf-Pw"):
        assert form not in out, f"{form!r} shown"        # ...without the password
    assert redacted in out or "***" in out
