"""Which conformance targets the plugin finds, and which of them a required list fails on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portq.conformance import plugin


def _by_id(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, plugin.Target]:
    monkeypatch.delenv("PORTQ_TEST_PG18_URL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return {t.id: t for t in plugin._default_targets()}


def test_postgres18_is_skipped_with_its_reason_when_unset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    target = _by_id(monkeypatch)["postgres18"]
    assert target.engine == "postgres"
    assert target.url is None
    assert "PORTQ_TEST_PG18_URL" in target.reason and ".ci/pg18.sh" in target.reason


def test_postgres18_runs_on_the_url_given(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://postgres@127.0.0.1:5433/test"
    target = _by_id(monkeypatch, PORTQ_TEST_PG18_URL=url)["postgres18"]
    assert (target.engine, target.url) == ("postgres", url)


def test_requiring_postgres_does_not_require_postgres18(tmp_path: Path) -> None:
    """A required engine name matches the target id, so the optional postgres18 target
    still skips (with its reason) while `postgres` is required."""
    (tmp_path / "test_one.py").write_text("def test_needs_engine(engine_url):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "PORTQ_TEST_PG18_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "portq.conformance.plugin", "-rs", "-q",
         "-k", "postgres18", "--portq-require", "postgres", "-c", os.devnull, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "PORTQ_TEST_PG18_URL not set" in done.stdout


def test_sqlserver_runs_a_second_time_with_read_committed_snapshot_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PORTQ_TEST_MSSQL_RCSI_URL", raising=False)
    off = "mssql://sa:pw@db:1433/portq?TrustServerCertificate=yes"
    targets = _by_id(monkeypatch, PORTQ_TEST_MSSQL_URL=off)
    assert targets["sqlserver"].url == off
    assert targets["sqlserver-rcsi"].url is None      # your own server: name the second one
    assert "PORTQ_TEST_MSSQL_RCSI_URL" in targets["sqlserver-rcsi"].reason
    on = "mssql://sa:pw@db:1433/portq_rcsi?TrustServerCertificate=yes"
    targets = _by_id(monkeypatch, PORTQ_TEST_MSSQL_URL=off, PORTQ_TEST_MSSQL_RCSI_URL=on)
    assert (targets["sqlserver-rcsi"].engine, targets["sqlserver-rcsi"].url) == \
        ("sqlserver", on)


def test_sqlserver_container_url_names_its_rcsi_twin() -> None:
    from portq.conformance.containers import sqlserver_rcsi_url

    assert sqlserver_rcsi_url("mssql://sa:p@h:1/portq?TrustServerCertificate=yes&driver=x") \
        == "mssql://sa:p@h:1/portq_rcsi?TrustServerCertificate=yes&driver=x"


def _run_one_engine_test(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A module of three engine tests, run for the unreachable SQL Server only."""
    (tmp_path / "test_three.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('n', range(3))\n"
        "def test_needs_engine(engine_url, n):\n    pass\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PORTQ_TEST_MSSQL_URL", "PORTQ_REQUIRE_ENGINES")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "portq.conformance.plugin", "-rs", "-q",
         "-k", "sqlserver and not rcsi", "-c", os.devnull, *args, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120)


def test_an_unreachable_engine_is_one_skipped_item_naming_why(tmp_path: Path) -> None:
    done = _run_one_engine_test(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "passed" not in done.stdout
    assert "sqlserver: no SQL Server server reachable" in done.stdout
    assert "(3 tests of it not collected)" in done.stdout


def test_an_unreachable_required_engine_is_one_failure(tmp_path: Path) -> None:
    done = _run_one_engine_test(tmp_path, "--portq-require", "sqlserver")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "required engine unavailable: sqlserver" in done.stdout


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql://postgres@127.0.0.1:5432/test", "postgresql://postgres@127.0.0.1:5432/test_gw3"),
    ("mysql://root@127.0.0.1:3306/h_t?charset=utf8mb4",
     "mysql://root@127.0.0.1:3306/h_t_gw3?charset=utf8mb4"),
    ("postgresql://u@h1:5432,h2:5432/shop?target_session_attrs=read-write",
     "postgresql://u@h1:5432,h2:5432/shop_gw3?target_session_attrs=read-write"),
])
def test_each_xdist_worker_gets_a_database_of_its_own(url: str, expected: str) -> None:
    assert plugin.worker_database_url(url, "gw3") == expected


def test_a_url_without_a_database_is_not_given_a_worker_database() -> None:
    with pytest.raises(ValueError, match="no database name"):
        plugin.worker_database_url("postgresql://postgres@127.0.0.1:5432", "gw0")
