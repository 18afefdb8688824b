"""URL parsing: engine selection, driver forms, redaction, and clear errors."""

from __future__ import annotations

import pytest

from portq.errors import ConfigurationError
from portq.url import parse_url


@pytest.mark.parametrize(("url", "engine"), [
    ("sqlite:///jobs.db", "sqlite"),
    ("sqlite:////var/lib/app/jobs.db", "sqlite"),
    ("sqlite+pysqlite:///jobs.db", "sqlite"),
    ("postgresql://u@h/db", "postgres"),
    ("postgres://u@h/db", "postgres"),
    ("postgresql+psycopg://u@h:5433/db", "postgres"),
    ("mysql://root@127.0.0.1:3306/test", "mysql"),
    ("mysql+pymysql://root@127.0.0.1/test", "mysql"),
    ("mariadb://root@127.0.0.1/test", "mysql"),
    ("mssql://sa:pw@h:1433/db", "sqlserver"),
    ("mssql+pyodbc://sa:pw@h/db?driver=ODBC+Driver+18+for+SQL+Server", "sqlserver"),
    ("sqlserver://sa:pw@h/db", "sqlserver"),
    ("oracle://u:pw@h:1521/FREEPDB1", "oracle"),
    ("oracle+oracledb://u:pw@h/FREEPDB1", "oracle"),
])
def test_engines_by_scheme(url: str, engine: str) -> None:
    assert parse_url(url).engine == engine


def test_fields_and_percent_decoding() -> None:
    u = parse_url("postgresql://app%40corp:p%40ss%3Aw0rd@db.example:6543/jobs?sslmode=require")
    assert (u.username, u.password, u.host, u.port, u.database) == (
        "app@corp", "p@ss:w0rd", "db.example", 6543, "jobs")
    assert u.query == {"sslmode": "require"}


def test_sqlite_paths() -> None:
    assert parse_url("sqlite:///rel/jobs.db").path == "rel/jobs.db"
    assert parse_url("sqlite:////abs/jobs.db").path == "/abs/jobs.db"
    assert parse_url("sqlite://:memory:").path == ":memory:"


@pytest.mark.parametrize("url", [
    "postgresql://app:Sup3r-S3cret@db:5432/jobs",
    "mysql+pymysql://root:Sup3r-S3cret@h/test",
    "mssql://sa:Sup3r-S3cret@h/db?PWD=Sup3r-S3cret",
])
def test_password_never_shown(url: str) -> None:
    u = parse_url(url)
    for text in (str(u), repr(u), u.redacted()):
        assert "Sup3r-S3cret" not in text
        assert "***" in text


@pytest.mark.parametrize(("url", "message"), [
    ("", "empty"),
    ("jobs.db", "malformed"),
    ("redis://localhost/0", "unknown database engine 'redis'"),
    ("postgresql+asyncpg://u@h/db", "unsupported driver 'asyncpg'"),
    ("postgresql://u:Sup3r-S3cret@/db", "names no host"),
    ("postgresql://u@h:notaport/db", "malformed"),
    ("sqlite://relative.db", "malformed SQLite URL"),
])
def test_bad_urls_are_named(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        parse_url(url)
    assert "Sup3r-S3cret" not in str(info.value)
