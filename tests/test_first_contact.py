"""What a new user meets first, through the real ``portq`` command: every mistake (an
unmigrated database, a refused login, a missing database, a held SQLite lock, a payload
nested too deep, a handler module that raises on import, a driver missing its system
library) is one ``portq: error:`` line, no traceback, no password, exit 2 (1 for a lock
held too long: a failure at run time)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import portq
from portq.conformance.helpers import run_portq
from portq.conformance.test_first_contact import fresh_prefix, with_credentials
from portq.url import parse_url


def one_error_line(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The single ``portq: error:`` line ``proc`` printed, checking the exit code."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("portq: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


COMMANDS = [["stats"], ["jobs"], ["enqueue", "--queue", "q", "--payload", "1"], ["reap"],
            ["prune", "--older-than", "1d"], ["retry", "1"], ["cancel", "1"],
            ["worker", "--queue", "q", "--handler", "json:loads", "--burst"]]


def test_unmigrated_database_is_one_line_for_every_command(engine_url: str) -> None:
    prefix = fresh_prefix()
    shown = parse_url(engine_url).redacted()
    for command in COMMANDS:
        args = [command[0], engine_url, *command[1:], "--prefix", prefix]
        line = one_error_line(run_portq(*args, check=False))
        assert line == (f"portq: error: no portq tables with prefix {prefix!r} in {shown} — "
                        f"run: portq migrate URL --prefix {prefix}"), command
    with portq.connect(engine_url, prefix=prefix) as q:
        assert q.backend.schema_version() == 0


def test_default_prefix_message_is_the_documented_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/never-migrated.db"
    line = one_error_line(run_portq("stats", url, check=False))   # no file: none is made
    assert line == (f"portq: error: no SQLite database at {tmp_path}/never-migrated.db "
                    "(a typo? `portq migrate URL` creates it)")
    (tmp_path / "never-migrated.db").touch()                       # a file, no tables
    line = one_error_line(run_portq("stats", url, check=False))
    assert line == f"portq: error: no portq tables in {url} — run: portq migrate URL"


def test_refused_login_and_missing_database_are_one_line(engine_url: str) -> None:
    if parse_url(engine_url).engine == "sqlite":
        pytest.skip("SQLite has no login and no server-side database")
    secret = "Wr0ng-" + uuid.uuid4().hex[:8]
    missing = f"portq_no_such_db_{uuid.uuid4().hex[:6]}"
    bad_login = with_credentials(engine_url, password=secret)
    if parse_url(engine_url).engine == "postgres":  # trust auth takes any password
        bad_login = with_credentials(engine_url, user="portq_no_such_user", password=secret)
    for command in (["stats"], ["enqueue", "--queue", "q"], ["migrate"]):
        line = one_error_line(run_portq(command[0], bad_login, *command[1:], check=False))
        assert line.startswith("portq: error: cannot log in to ") and secret not in line
        assert "***" in line
        line = one_error_line(run_portq(command[0], with_credentials(
            engine_url, database=missing), *command[1:], check=False))
        assert f"database {missing!r} does not exist on " in line
        assert "lost the connection" not in line


def test_sqlite_lock_held_past_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    url = f"sqlite:///{path}?busy_timeout_ms=200"
    with portq.connect(url) as q:
        q.migrate()
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")   # another process's long write transaction
        try:
            with pytest.raises(portq.DatabaseBusy) as raised:
                q.enqueue("q", 1)
            line = one_error_line(run_portq("enqueue", url, "--queue", "q", check=False),
                                  code=1)
        finally:
            holder.rollback()
            holder.close()
        for text in (str(raised.value), line):
            assert f"SQLite database {path} stayed locked" in text
            assert "busy_timeout_ms=200" in text and "?busy_timeout_ms=" in text
        assert q.stats() == []    # nothing was written


def test_deep_payload_overflowing_run_at_and_raising_handler(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    run_portq("migrate", url)
    deep = "[" * 5000 + "]" * 5000
    line = one_error_line(run_portq("enqueue", url, "--queue", "q", "--payload", deep,
                                    check=False))
    assert "nests arrays/objects more than 31 levels deep" in line
    with portq.connect(url) as q:
        value: object = 1
        for _ in range(5000):
            value = [value]
        with pytest.raises(portq.PayloadError, match="more than 31 levels deep"):
            q.enqueue("q", value)
        minus_five = timezone(timedelta(hours=-5))
        with pytest.raises(portq.ConfigurationError, match="run_at 9999-12-31T23:00:00-05:00 "
                                                           "is out of range"):
            q.enqueue("q", 1, run_at=datetime(9999, 12, 31, 23, tzinfo=minus_five))
        assert q.stats() == []
    (tmp_path / "raises_on_import.py").write_text("SETTINGS = {}\nLIMIT = SETTINGS['limit']\n")
    (tmp_path / "bad_syntax.py").write_text("def handle(job:\n")
    for module, error in (("raises_on_import", "KeyError"), ("bad_syntax", "SyntaxError")):
        line = one_error_line(run_portq("worker", url, "--queue", "q", "--handler",
                                        f"{module}:handle", "--burst", cwd=tmp_path,
                                        check=False))
        assert f"handler module {module!r} raised {error} while importing at " in line
        assert f"{module}.py:" in line


UNLOADABLE_PYODBC = '''raise ImportError(
    "libodbc.so.2: cannot open shared object file: No such file or directory")
'''


def test_pyodbc_without_libodbc_names_the_system_library(tmp_path: Path) -> None:
    """pyodbc installed, unixODBC not: building the backend works (nothing links
    libodbc), connecting names the library and how to install it. Where libodbc is
    installed a stand-in pyodbc raises the ImportError the real one raises without it."""
    env = {}
    import_check = subprocess.run([sys.executable, "-c", "import pyodbc"],
                                  capture_output=True, text=True, timeout=60)
    if import_check.returncode == 0:
        (tmp_path / "pyodbc.py").write_text(UNLOADABLE_PYODBC)
        env["PYTHONPATH"] = str(tmp_path)
    url = "mssql://sa:S3cret-Pw@127.0.0.1:1/shop"
    script = textwrap.dedent(f"""
        import portq
        q = portq.connect({url!r})
        print(q.backend.redacted_connection_string())
        try:
            q.stats()
        except portq.DriverMissingError as exc:
            print(exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    assert "PWD=***" in proc.stdout and "libodbc.so.2" in proc.stdout
    assert "apt-get install unixodbc" in proc.stdout and "not installed" not in proc.stdout
    line = one_error_line(run_portq("stats", url, env=env, check=False))
    assert "installed but cannot load" in line and "apt-get install unixodbc" in line
    assert "S3cret-Pw" not in proc.stdout + line


def test_async_api_on_an_unmigrated_database(engine_url: str) -> None:
    import asyncio

    from portq import aio

    async def main() -> list[BaseException]:
        q = await aio.connect(engine_url, prefix=fresh_prefix())
        errors: list[BaseException] = []
        try:
            for call in (q.stats(), q.enqueue("q", 1)):
                try:
                    await call
                except portq.PortqError as exc:
                    errors.append(exc)
        finally:
            await q.close()
        return errors

    errors = asyncio.run(main())
    assert [type(e) for e in errors] == [portq.SchemaMissingError] * 2


def test_bad_url_options_are_one_line(tmp_path: Path) -> None:
    for url, message in (
            (f"sqlite:///{tmp_path}/x.db?busy_timeout_ms=abc",
             "busy_timeout_ms='abc' must be a whole number of milliseconds"),
            (f"sqlite:///{tmp_path}/x.db?bogus=1", "unknown SQLite URL option 'bogus'"),
            ("postgresql://postgres:S3cret@127.0.0.1:5432/db?bogus_option=1",
             'unknown PostgreSQL URL option: invalid connection option "bogus_option";'),
            ("mysql://root:S3cret@127.0.0.1:3306/db?charset=bogus",
             "MySQL URL option charset='bogus' is not a character set"),
            ("mysql://root:S3cret@127.0.0.1:3306/db?ssl_ca=/no/such/ca.pem",
             "MySQL URL option ssl_ca='/no/such/ca.pem': no such file")):
        line = one_error_line(run_portq("stats", url, check=False))
        assert message in line and "S3cret" not in line
