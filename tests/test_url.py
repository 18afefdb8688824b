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
    ("mysql://u:Sup3r-S3cret@/db", "names no host"),  # PostgreSQL's: libpq's socket
    ("postgresql://u@h:notaport/db", "malformed"),
    ("sqlite://relative.db", "malformed SQLite URL"),
])
def test_bad_urls_are_named(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        parse_url(url)
    assert "Sup3r-S3cret" not in str(info.value)


# ---- passwords in every form, valid or malformed URL (hypothesis) -----------------------

from urllib.parse import quote  # noqa: E402

from hypothesis import assume, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from portq.url import redact_text  # noqa: E402

PASSWORD_CHARS = st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"])
FORMS = {
    "userinfo encoded": "{scheme}://app:{enc}@{host}/db",
    "userinfo raw": "{scheme}://app:{raw}@{host}/db",
    "password option": "{scheme}://app@{host}/db?sslmode=require&password={enc}",
    "pwd option": "{scheme}://app@{host}/db?pwd={enc}",
    "PWD option": "{scheme}://app@{host}/db?PWD={enc}&x=1",
    "wallet option": "{scheme}://app@{host}/db?wallet_password={enc}",
    "odbc_connect": "{scheme}://{host}/db?odbc_connect="
                    "DRIVER%3DFreeTDS%3BUID%3Dsa%3BPWD%3D{odbc}%3B",
    "no scheme": "app:{raw}@{host}/db",
}


@settings(max_examples=400, deadline=None)
@given(password=st.text(PASSWORD_CHARS, min_size=6, max_size=24),
       form=st.sampled_from(sorted(FORMS)),
       scheme=st.sampled_from(["postgresql", "mysql", "mssql", "oracle", "redis",
                               "postgresql+asyncpg"]),
       host=st.sampled_from(["127.0.0.1:5432", "db.example", "127.0.0.1", "127.0.0.1:bad",
                             "[::1]:99999",
                             "", "h:1/x/y", "h1:5432,h2:5433", "h1,[::1]:5", "h1:5432,h2:x",
                             "h1,,h2"]))
@example(password="hunter2", form="password option", scheme="postgresql",
         host="127.0.0.1:bad")
@example(password="p@ss@x", form="userinfo raw", scheme="postgresql", host="127.0.0.1:bad")
@example(password="12/abc", form="userinfo raw", scheme="postgresql", host="db.example")
@example(password="p@ss/word", form="userinfo raw", scheme="postgresql", host="127.0.0.1")
@example(password="se;c}r{t", form="odbc_connect", scheme="mssql", host="db.example")
@example(password="p@ss,w:rd", form="userinfo raw", scheme="postgresql", host="h1:5432,h2:5433")
@example(password="p@ss,w:rd", form="userinfo raw", scheme="mysql", host="h1:5432,h2:5433")
def test_a_password_is_never_shown(password: str, form: str, scheme: str, host: str) -> None:
    password = "§" + password   # never part of portq's own message text ("psycop...")
    enc = quote(password, safe="")
    odbc = quote("{" + password.replace("}", "}}") + "}", safe="")
    url = FORMS[form].format(scheme=scheme, host=host, enc=enc, raw=password, odbc=odbc)
    rest = FORMS[form].format(scheme=scheme, host=host, enc="", raw="", odbc="")
    assume(password not in rest and enc not in rest and password.strip() == password)
    try:
        parsed = parse_url(url)
    except ConfigurationError as exc:
        shown = [str(exc), repr(exc)]
    else:
        shown = [str(parsed), repr(parsed), parsed.redacted(),
                 parsed.scrub(f"driver said: {password} / {enc}")]
        for secret in (parsed.password, quote(parsed.password or "", safe="")):
            if secret:
                assert parsed.scrub(secret) == "***"
        # a URL that parses was read right: no part of the password became host or path
        if form == "userinfo encoded" or (form == "userinfo raw" and "%" not in password):
            assert parsed.password == password, url
    for text in shown:
        assert password not in text and enc not in text, (url, text)


def test_odbc_and_free_text_secrets_are_redacted() -> None:
    assert redact_text("DRIVER={x};UID=sa;PWD={a;b}}c};APP=y") == \
        "DRIVER={x};UID=sa;PWD=***;APP=y"
    assert redact_text("Password=abc;Server=h") == "Password=***;Server=h"
    # a space-separated (libpq) string: the value runs to the end, hiding more, never less
    assert redact_text("user=app password=s3 cr3t host=h") == "user=app password=***"
