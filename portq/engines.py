"""The engines portq runs on: one record per engine, read by the URL parser, the backend
loader, the conformance plugin and its containers, the Django and SQLAlchemy integrations,
``portq bench`` and the tests. Adding an engine starts here (docs/architecture.md,
"Adding an engine")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """What portq knows of one engine, outside its backend module and dialect folder."""

    #: portq's name for it: ``DatabaseURL.engine``, ``Backend.engine``, ``dialects/<name>/``
    name: str
    #: how reports and errors name it
    label: str
    #: URL schemes selecting it (``postgresql://``), the first one canonical
    schemes: tuple[str, ...]
    #: ``+driver`` names its URLs accept (``postgresql+psycopg://``)
    url_drivers: tuple[str, ...]
    #: the DB-API module imported to connect (None: in the standard library)
    driver: str | None
    #: the pip extra installing the driver (and pytest, for ``portq conformance``)
    extra: str
    #: ``module:Class`` of its backend
    backend: str
    #: Django's ``connection.vendor`` for it (MariaDB's is ``mysql``)
    django_vendor: str
    #: SQLAlchemy dialect names (``Dialect.name``) that connect to it, and the async
    #: drivers of those whose connections portq.aio can write through
    sqlalchemy_dialects: tuple[str, ...]
    sqlalchemy_async_drivers: tuple[str, ...]
    #: sqlglot's dialect name, and the placeholder style sqlglot reads in it (the static
    #: SQL tests bind the dialect's statements so before parsing them)
    sqlglot_dialect: str
    sqlglot_paramstyle: str
    #: the Docker image the conformance plugin starts (testcontainers) when no URL is
    #: given, and the services of compose/docker-compose.yml that run it
    image: str | None
    compose_services: tuple[str, ...]
    #: the environment variable naming a test server, and the URL tried when it is unset
    #: (None: a container, or the reason it is skipped)
    test_url_env: str | None
    default_test_url: str | None
    #: how ``portq bench`` reads the plan of its claim (a reader in portq/bench/plans.py;
    #: None: no reader), and the server's process names whose CPU it samples
    bench_plan: str | None
    server_processes: tuple[str, ...]
    #: True when a server runs here and the suite exercises it; False: written from the
    #: vendor's documentation and statically tested (docs/engines.md)
    live_here: bool
    #: True when a URL names a file, not a server (no server processes, one writer at a time)
    file_based: bool = False

    @property
    def dialect_dir(self) -> str:
        """Its SQL folder, relative to the repository: ``dialects/<name>``."""
        return f"dialects/{self.name}"

    @property
    def backend_module(self) -> str:
        return self.backend.partition(":")[0]

    @property
    def backend_class(self) -> str:
        return self.backend.partition(":")[2]


ENGINES: tuple[Engine, ...] = (
    Engine(name="sqlite", label="SQLite", schemes=("sqlite",),
           url_drivers=("pysqlite", "sqlite3"), driver=None, extra="sqlite",
           backend="portq.backends.sqlite:SqliteBackend", django_vendor="sqlite",
           sqlalchemy_dialects=("sqlite",),
           sqlalchemy_async_drivers=("aiosqlite",), sqlglot_dialect="sqlite",
           sqlglot_paramstyle="qmark",
           image=None, compose_services=(), test_url_env=None, default_test_url=None,
           bench_plan="sqlite-query-plan", server_processes=(),
           live_here=True, file_based=True),
    Engine(name="postgres", label="PostgreSQL", schemes=("postgresql", "postgres"),
           url_drivers=("psycopg", "psycopg3"), driver="psycopg", extra="postgres",
           backend="portq.backends.postgres:PostgresBackend", django_vendor="postgresql",
           sqlalchemy_dialects=("postgresql",),
           sqlalchemy_async_drivers=("psycopg",), sqlglot_dialect="postgres",
           sqlglot_paramstyle="qmark", image="postgres:18", compose_services=("postgres",),
           test_url_env="PORTQ_TEST_PG_URL",
           default_test_url="postgresql://postgres@127.0.0.1:5432/test",
           bench_plan="postgres-json", server_processes=("postgres",),
           live_here=True),
    Engine(name="mysql", label="MySQL/MariaDB", schemes=("mysql", "mariadb"),
           url_drivers=("pymysql",), driver="pymysql", extra="mysql",
           backend="portq.backends.mysql:MysqlBackend", django_vendor="mysql",
           sqlalchemy_dialects=("mysql", "mariadb"),
           sqlalchemy_async_drivers=("aiomysql", "asyncmy"), sqlglot_dialect="mysql",
           sqlglot_paramstyle="qmark", image="mysql:8.4",
           compose_services=("mysql", "mariadb"),
           test_url_env="PORTQ_TEST_MYSQL_URL",
           default_test_url="mysql://root@127.0.0.1:3306/test", bench_plan="mysql-json",
           server_processes=("mariadbd", "mysqld"),
           live_here=True),
    Engine(name="sqlserver", label="SQL Server", schemes=("mssql", "sqlserver"),
           url_drivers=("pyodbc", "mssqlpython"), driver="pyodbc", extra="sqlserver",
           backend="portq.backends.sqlserver:SqlServerBackend", django_vendor="microsoft",
           sqlalchemy_dialects=("mssql",),
           sqlalchemy_async_drivers=(), sqlglot_dialect="tsql",
           sqlglot_paramstyle="qmark",
           image="mcr.microsoft.com/mssql/server:2022-latest", compose_services=("mssql",),
           test_url_env="PORTQ_TEST_MSSQL_URL", default_test_url=None, bench_plan=None,
           server_processes=(),
           live_here=False),
    Engine(name="oracle", label="Oracle", schemes=("oracle",), url_drivers=("oracledb",),
           driver="oracledb", extra="oracle", backend="portq.backends.oracle:OracleBackend",
           django_vendor="oracle", sqlalchemy_dialects=("oracle",),
           sqlalchemy_async_drivers=(), sqlglot_dialect="oracle",
           sqlglot_paramstyle="named", image="gvenzl/oracle-free:23-slim-faststart",
           compose_services=("oracle",), test_url_env="PORTQ_TEST_ORACLE_URL",
           default_test_url=None, bench_plan=None, server_processes=(),
           live_here=False),
)
#: engine name -> its record
BY_NAME: dict[str, Engine] = {e.name: e for e in ENGINES}
#: every engine's name, in the registry's order
NAMES: tuple[str, ...] = tuple(BY_NAME)
#: URL scheme -> engine name
SCHEMES: dict[str, str] = {s: e.name for e in ENGINES for s in e.schemes}
#: SQLAlchemy dialect name -> engine name
SQLALCHEMY_DIALECTS: dict[str, str] = {d: e.name for e in ENGINES
                                       for d in e.sqlalchemy_dialects}
#: Django ``connection.vendor`` -> the canonical URL scheme of its engine
DJANGO_VENDORS: dict[str, str] = {e.django_vendor: e.schemes[0] for e in ENGINES}


def engine(name: str) -> Engine:
    """The record of engine ``name`` (a ``KeyError`` names the known ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; portq's engines: {', '.join(NAMES)}") \
            from None


def live_engines() -> tuple[str, ...]:
    """The engines a server runs for here (the others are statically tested)."""
    return tuple(e.name for e in ENGINES if e.live_here)
