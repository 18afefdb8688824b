"""One module per engine; :func:`backend_for` picks it from a parsed URL."""

from __future__ import annotations

import importlib
from typing import Any

from portq.backends.base import SqlBackend
from portq.errors import DriverMissingError
from portq.url import DatabaseURL

# engine -> (module, class, driver import name, pip extra)
BACKENDS: dict[str, tuple[str, str, str | None, str | None]] = {
    "sqlite": ("portq.backends.sqlite", "SqliteBackend", None, None),
    "postgres": ("portq.backends.postgres", "PostgresBackend", "psycopg", "postgres"),
    "mysql": ("portq.backends.mysql", "MysqlBackend", "pymysql", "mysql"),
    "sqlserver": ("portq.backends.sqlserver", "SqlServerBackend", "pyodbc", "sqlserver"),
    "oracle": ("portq.backends.oracle", "OracleBackend", "oracledb", "oracle"),
}


def backend_for(url: DatabaseURL, **options: Any) -> SqlBackend:
    """Build the backend for ``url``; a missing driver raises :class:`DriverMissingError`."""
    module_name, class_name, driver, extra = BACKENDS[url.engine]
    if url.engine == "sqlserver":   # pyodbc, or Microsoft's mssql-python (url option)
        from portq.backends.sqlserver import dbapi_module
        if dbapi_module(url) == "mssql_python":
            driver, extra = "mssql_python", "mssql-python"
    if driver is not None:
        try:
            importlib.import_module(driver)
        except ImportError as exc:
            raise DriverMissingError(
                f"the {url.engine} engine needs the {driver} driver, which is not installed "
                f"({exc}); install it with: pip install 'portq[{extra}]'") from None
    cls: type[SqlBackend] = getattr(importlib.import_module(module_name), class_name)
    return cls(url, **options)
