"""Connection URLs: engine selection, driver options and a password-free form for logs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from portq.errors import ConfigurationError

# scheme (with optional +driver) -> (engine, accepted driver names)
ENGINES: dict[str, str] = {
    "sqlite": "sqlite",
    "postgresql": "postgres",
    "postgres": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "mssql": "sqlserver",
    "sqlserver": "sqlserver",
    "oracle": "oracle",
}
DRIVERS: dict[str, frozenset[str]] = {
    "sqlite": frozenset({"pysqlite", "sqlite3"}),
    "postgres": frozenset({"psycopg", "psycopg3"}),
    "mysql": frozenset({"pymysql"}),
    "sqlserver": frozenset({"pyodbc"}),
    "oracle": frozenset({"oracledb"}),
}
_SCHEME = re.compile(r"^([a-z][a-z0-9]*)(?:\+([a-z0-9_]+))?$")


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed connection URL. ``str()`` and ``repr()`` never show the password."""

    engine: str
    scheme: str
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None
    query: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """The SQLite file path (``database`` for the other engines)."""
        return self.database or ""

    def redacted(self) -> str:
        """The URL with any password replaced by ``***``."""
        if self.engine == "sqlite":
            return f"{self.scheme}:///{self.path}"
        auth = ""
        if self.username is not None:
            auth = self.username + (":***" if self.password is not None else "") + "@"
        host = self.host or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{self.port}" if self.port is not None else ""
        db = f"/{self.database}" if self.database else ""
        qs = "&".join(f"{k}={'***' if 'pass' in k.lower() or k.lower() == 'pwd' else v}"
                      for k, v in self.query.items())
        return f"{self.scheme}://{auth}{host}{port}{db}" + (f"?{qs}" if qs else "")

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return f"DatabaseURL({self.redacted()!r})"


def parse_url(url: str) -> DatabaseURL:
    """Parse a connection URL; raise :class:`ConfigurationError` naming what is wrong."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError("database URL is empty; expected e.g. sqlite:///portq.db "
                                 "or postgresql://user@host/db")
    url = url.strip()
    if "://" not in url:
        raise ConfigurationError(
            f"malformed database URL {_safe(url)!r}: expected SCHEME://..., "
            f"one of {', '.join(sorted(ENGINES))}")
    raw_scheme, rest = url.split("://", 1)
    m = _SCHEME.match(raw_scheme.lower())
    if not m or m.group(1) not in ENGINES:
        raise ConfigurationError(
            f"unknown database engine {raw_scheme!r} in URL {_safe(url)!r}; "
            f"supported schemes: {', '.join(sorted(ENGINES))} (optionally +driver)")
    base, driver = m.group(1), m.group(2)
    engine = ENGINES[base]
    if driver is not None and driver not in DRIVERS[engine]:
        raise ConfigurationError(
            f"unsupported driver {driver!r} for {base}; portq uses "
            f"{' or '.join(sorted(DRIVERS[engine]))}: write {base}+"
            f"{sorted(DRIVERS[engine])[0]}://... (the same URL serves portq.aio)")
    if engine == "sqlite":
        return _parse_sqlite(raw_scheme.lower(), rest, url)
    try:
        parts = urlsplit(f"x://{rest}")
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(f"malformed database URL {_safe(url)!r}: {exc}") from None
    if not parts.hostname:
        raise ConfigurationError(f"database URL {_safe(url)!r} names no host")
    database = unquote(parts.path.lstrip("/")) or None
    return DatabaseURL(
        engine=engine,
        scheme=raw_scheme.lower(),
        host=parts.hostname,
        port=port,
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        database=database,
        query=dict(parse_qsl(parts.query, keep_blank_values=True)),
    )


def _parse_sqlite(scheme: str, rest: str, url: str) -> DatabaseURL:
    # sqlite:///relative.db, sqlite:////abs/path.db, sqlite://:memory:
    path, _, qs = rest.partition("?")
    if path == ":memory:" or path == "/:memory:":
        db = ":memory:"
    elif path.startswith("/"):
        db = unquote(path[1:])
    else:
        raise ConfigurationError(
            f"malformed SQLite URL {url!r}: use sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db")
    if not db:
        raise ConfigurationError(f"SQLite URL {url!r} names no file")
    return DatabaseURL(engine="sqlite", scheme=scheme, database=db,
                       query=dict(parse_qsl(qs, keep_blank_values=True)))


def _safe(url: str) -> str:
    """Best-effort password removal for URLs too broken to parse."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def connect_kwargs(url: DatabaseURL, **extra: Any) -> dict[str, Any]:
    """Common keyword arguments (host, port, user, password, database) for a driver."""
    kw: dict[str, Any] = {k: v for k, v in {
        "host": url.host, "port": url.port, "user": url.username,
        "password": url.password, "database": url.database}.items() if v is not None}
    kw.update(extra)
    return kw
