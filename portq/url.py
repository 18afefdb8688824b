"""Connection URLs: engine selection, driver options and a password-free form for logs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

from portq import engines as registry
from portq.errors import ConfigurationError

#: scheme (with optional +driver) -> engine, and each engine's accepted +driver names
ENGINES: dict[str, str] = dict(registry.SCHEMES)
DRIVERS: dict[str, frozenset[str]] = {e.name: frozenset(e.url_drivers)
                                      for e in registry.ENGINES}
_SCHEME = re.compile(r"^([a-z][a-z0-9]*)(?:\+([a-z0-9_]+))?$")
#: URL query options whose value is a secret (password=, pwd=, PWD=, wallet_password=, ...)
_SECRET_OPTION = re.compile(r"pass|pwd|secret|token", re.IGNORECASE)
#: ``key=value`` pairs with a secret key inside free text (a malformed URL, an ODBC
#: connection string such as odbc_connect=): the value, braced ODBC-style or up to the
#: next separator, is group 2
_SECRET_PAIR = re.compile(
    r"(?i)((?:^|(?<=[?&;\s]))[\w.-]*(?:pass|pwd|secret|token)[\w.-]*\s*=\s*)"
    r"(\{(?:[^}]|\}\})*\}?|[^;&]*)")
#: libpq's multi-host options and the values it accepts (PostgreSQL 16+ for
#: load_balance_hosts; psycopg 3 applies both itself, whatever its libpq)
LIBPQ_CHOICES: dict[str, tuple[str, ...]] = {
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby",
                             "prefer-standby"),
    "load_balance_hosts": ("disable", "random"),
}
#: a host list is a PostgreSQL (libpq) form; the others are given one address
PROXY_HINT = ("put a proxy or a virtual IP (ProxySQL, MaxScale, HAProxy, a cloud "
              "endpoint) in front of the servers and give its one address "
              "(docs/operations.md, 'Failover')")


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
    #: every (host, port) of a libpq host list, in order; ``host``/``port`` are the first
    hosts: tuple[tuple[str, int | None], ...] = ()

    def __post_init__(self) -> None:
        if not self.hosts and self.host is not None:
            object.__setattr__(self, "hosts", ((self.host, self.port),))

    @property
    def multi_host(self) -> bool:
        """True for a libpq host list (``postgresql://u@h1:5432,h2:5432/db``)."""
        return len(self.hosts) > 1

    @property
    def netloc_hosts(self) -> str:
        """The host list as written in a URL (IPv6 addresses in brackets, a Unix socket
        directory percent-encoded), no user; empty for libpq's default socket."""
        return ",".join(_netloc_host(h) + ("" if p is None else f":{p}") for h, p in self.hosts)

    @property
    def driver(self) -> str | None:
        """The ``+driver`` part of the scheme (``mssqlpython`` in ``mssql+mssqlpython://``)."""
        return self.scheme.partition("+")[2] or None

    @property
    def path(self) -> str:
        """The SQLite file path (``database`` for the other engines)."""
        return self.database or ""

    def redacted(self) -> str:
        """The URL with any password replaced by ``***``."""
        if registry.BY_NAME[self.engine].file_based:
            return f"{self.scheme}:///{self.path}"
        auth = ""
        if self.username is not None:
            auth = self.username + (":***" if self.password is not None else "") + "@"
        db = f"/{self.database}" if self.database else ""
        qs = "&".join(f"{k}={_redacted_option(k, v)}" for k, v in self.query.items())
        return f"{self.scheme}://{auth}{self.netloc_hosts}{db}" + (f"?{qs}" if qs else "")

    def secrets(self) -> list[str]:
        """Every secret this URL holds (password, secret query options, passwords inside
        ODBC strings), also percent-encoded, longest first: what :meth:`scrub` removes."""
        found = {self.password} if self.password else set()
        for key, value in self.query.items():
            if _SECRET_OPTION.search(key):
                found.add(value)
            if key == "listen_url" and "://" in value:  # a URL inside: its own secrets
                try:
                    found.update(parse_url(value).secrets())
                except ConfigurationError:
                    found.add(value)
            for m in _SECRET_PAIR.finditer(value):
                found.add(m.group(2))
                found.add(m.group(2).strip("{}").replace("}}", "}"))
        found |= {form for text in list(found) for form in (quote(text, safe=""),
                                                             quote_plus(text))}
        return sorted((t for t in found if t), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` (a driver message, a test report) with this URL's secrets as ``***``."""
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text

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
    if registry.BY_NAME[engine].file_based:   # SQLite: a path, not a server
        return _parse_sqlite(raw_scheme.lower(), rest, url)
    if "#" in rest:
        raise ConfigurationError(
            f"malformed database URL {_safe(url)!r}: it holds a '#'; percent-encode it "
            "(%23) where it is part of a password")
    rest, hosts = _split_host_list(rest, url)
    try:
        parts = urlsplit(f"x://{rest}")
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(f"malformed database URL {_safe(url)!r}: {exc}") from None
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if engine == "postgres" and not parts.hostname and not hosts:
        hosts, pairs = _query_host_list(pairs, url)  # SQLAlchemy's ?host=h1:p1&host=h2:p2
    before_at = rest.partition("@")[0]
    if "@" in parts.path or any("@" in key for key, _ in parse_qsl(
            parts.query, keep_blank_values=True)) or (
            "@" in rest and "@" not in parts.netloc and ":" in before_at
            and "=" not in before_at):
        # user:pa/ss@host or user:p@ss/word@host: a '/' (or '?') ended the host part
        # inside the password, so what looks like the host or database is password text
        raise ConfigurationError(
            f"malformed database URL {_safe(url)!r}: an '@' after the host suggests a "
            "password holding '/' or '?'; percent-encode those characters (%2F, %3F; "
            "'@' is %40)")
    if not hosts and parts.hostname:  # libpq also takes a percent-encoded socket directory
        hosts = (((engine == "postgres" and _socket_dir(parts.netloc)) or parts.hostname,
                  port),)
    if not hosts and engine != "postgres":  # libpq alone has a default: its Unix socket
        raise ConfigurationError(f"database URL {_safe(url)!r} names no host")
    if len(hosts) > 1 and engine != "postgres":
        raise ConfigurationError(
            f"database URL {_safe(url)!r} lists {len(hosts)} hosts; a host list is "
            f"PostgreSQL's (libpq) form, not {base}'s: {PROXY_HINT}")
    query = dict(pairs)
    if engine == "postgres":
        _check_libpq_options(query, url)
    database = unquote(parts.path.lstrip("/")) or None
    return DatabaseURL(
        engine=engine,
        scheme=raw_scheme.lower(),
        host=hosts[0][0] if hosts else None,
        port=hosts[0][1] if hosts else None,
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        database=database,
        query=query,
        hosts=hosts,
    )


def _host_port(item: str, url: str) -> tuple[str, int | None]:
    """One ``host[:port]`` (``[v6]:port``, or a percent-encoded Unix socket directory)
    of a host list."""
    try:
        parts = urlsplit(f"x://{item}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigurationError(
            f"malformed host {item!r} in database URL {_safe(url)!r}: {exc}") from None
    if not host or parts.path or parts.username is not None:
        raise ConfigurationError(
            f"malformed host {item!r} in database URL {_safe(url)!r}: expected host or "
            "host:port, hosts separated by ','")
    return _socket_dir(item) or host, port


def _split_host_list(rest: str, url: str) -> tuple[str, tuple[tuple[str, int | None], ...]]:
    """``rest`` with a libpq host list (``h1:p1,h2:p2``) cut to its first host, and the
    list; no list: ``rest`` unchanged and ()."""
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc = rest[:end]
    userinfo, at, hostlist = netloc.rpartition("@")
    if "," not in hostlist:
        return rest, ()
    hosts = tuple(_host_port(item, url) for item in hostlist.split(","))
    first = hostlist.split(",", 1)[0]
    return userinfo + at + first + rest[end:], hosts


def _query_host_list(pairs: list[tuple[str, str]], url: str) -> tuple[
        tuple[tuple[str, int | None], ...], list[tuple[str, str]]]:
    """Hosts given as options when the URL's host part is empty: SQLAlchemy's spelling
    for psycopg (``?host=h1:5432&host=h2:5432``) or libpq's keywords (``?host=h1,h2`` with
    ``port=5432,5433`` or one port for all; a host may be a Unix socket directory,
    ``?host=/var/run/postgresql``). Returns the hosts and the other options."""
    items = [v for k, v in pairs if k == "host"]
    ports = [v for k, v in pairs if k == "port"]
    if len(items) == 1 and len(ports) <= 1:  # libpq: host=h1,h2 port=p1,p2
        items = host_items(items[0], ports[0] if ports else "",
                           f"database URL {_safe(url)!r}")
        pairs = [(k, v) for k, v in pairs if k != "port"]
    if not items:
        return (), pairs
    hosts = tuple(_host_port(item, url) for item in items)
    return hosts, [(k, v) for k, v in pairs if k != "host"]


def host_items(hosts: str, ports: str, where: str) -> list[str]:
    """libpq's comma-separated ``host`` and ``port`` values (one port for all hosts, or
    one per host) as the ``host:port`` items of a URL's host list (IPv6 in brackets, a
    Unix socket directory percent-encoded)."""
    names = hosts.split(",")
    numbers = ports.split(",")
    if len(numbers) == 1:
        numbers = numbers * len(names)
    if len(numbers) != len(names):
        raise ConfigurationError(f"{where} lists {len(names)} hosts but {len(numbers)} "
                                 "ports; give one port, or one per host")
    return [_netloc_host(h) + (f":{p}" if p else "") for h, p in zip(names, numbers, strict=True)]


def _netloc_host(host: str) -> str:
    """``host`` as a URL's host part: an IPv6 address in brackets, a Unix socket directory
    percent-encoded (libpq reads ``%2Fvar%2Frun%2Fpostgresql`` as ``/var/run/postgresql``)."""
    if host.startswith("/"):
        return quote(host, safe="")
    return f"[{host}]" if ":" in host else host


def _socket_dir(host_part: str) -> str | None:
    """The directory of a URL's host part (``[user@]host[:port]``) whose host is a
    percent-encoded Unix socket directory (libpq's URI form, ``%2Fvar%2Frun%2Fpostgresql``),
    taken from the text as written (``urlsplit`` lower-cases a host); None for any other
    host."""
    host = host_part.rpartition("@")[2].partition(":")[0]
    return unquote(host) if host[:3].lower() == "%2f" else None


def _check_libpq_options(query: dict[str, str], url: str) -> None:
    for key, allowed in LIBPQ_CHOICES.items():
        if key in query and query[key] not in allowed:
            raise ConfigurationError(
                f"{key}={query[key]!r} in database URL {_safe(url)!r} is not one of "
                f"{', '.join(allowed)}")


def _redacted_option(key: str, value: str) -> str:
    if _SECRET_OPTION.search(key):
        return "***"
    if key == "listen_url" and "://" in value:
        try:
            return parse_url(value).redacted()
        except ConfigurationError:
            return "***"
    return redact_text(value)


def _parse_sqlite(scheme: str, rest: str, url: str) -> DatabaseURL:
    # sqlite:///relative.db, sqlite:////abs/path.db, sqlite://:memory:
    path, _, qs = rest.partition("?")
    if path == ":memory:" or path == "/:memory:":
        db = ":memory:"
    elif path.startswith("/"):
        db = unquote(path[1:])
    else:
        raise ConfigurationError(
            f"malformed SQLite URL {_safe(url)!r}: use sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db")
    if not db:
        raise ConfigurationError(f"SQLite URL {_safe(url)!r} names no file")
    return DatabaseURL(engine="sqlite", scheme=scheme, database=db,
                       query=dict(parse_qsl(qs, keep_blank_values=True)))


def redact_text(text: str) -> str:
    """``text`` with the value of every ``key=value`` pair whose key names a secret
    (password, pwd, ...) replaced by ``***``: ODBC strings, malformed URLs."""
    return _SECRET_PAIR.sub(r"\1***", text)


def _safe(url: str) -> str:
    """A URL too broken to parse, percent-decoded, without its secrets: whatever stands
    between the first ':' of the user part and the LAST '@' (a password may hold '@',
    '/' or '?'), and the value of any secret ``key=value`` option."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    at = rest.rfind("@")
    if at >= 0:
        user, colon, _ = rest[:at].partition(":")
        if colon:
            rest = f"{user}:***{rest[at:]}"
    return redact_text(unquote_plus(head + sep + rest))


def connect_kwargs(url: DatabaseURL, **extra: Any) -> dict[str, Any]:
    """Common keyword arguments (host, port, user, password, database) for a driver."""
    kw: dict[str, Any] = {k: v for k, v in {
        "host": url.host, "port": url.port, "user": url.username,
        "password": url.password, "database": url.database}.items() if v is not None}
    kw.update(extra)
    return kw
