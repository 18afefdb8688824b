"""One module per engine; :func:`backend_for` picks it from a parsed URL."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from portq.backends.sql import SqlBackend
from portq.engines import ENGINES
from portq.errors import DriverMissingError
from portq.url import DatabaseURL

#: engine -> (module, class, driver import name, pip extra), from :mod:`portq.engines`
BACKENDS: dict[str, tuple[str, str, str | None, str | None]] = {
    e.name: (e.backend_module, e.backend_class, e.driver, e.extra if e.driver else None)
    for e in ENGINES}
#: drivers whose wheel links a system library that pip cannot install: what to install
SYSTEM_LIBRARIES: dict[str, str] = {
    "pyodbc": "unixODBC's libodbc.so.2: install it with `apt-get install unixodbc` "
              "(Debian/Ubuntu), `dnf install unixODBC` (Fedora/RHEL) or "
              "`brew install unixodbc` (macOS)",
    "mssql_python": "libltdl7, libkrb5-3 and libgssapi-krb5-2: install them with "
                    "`apt-get install libltdl7 libkrb5-3 libgssapi-krb5-2` (Debian/Ubuntu)",
}
#: pip extras of drivers that are not their engine's default
DRIVER_EXTRAS: dict[str, str] = {"mssql_python": "mssql-python"}
#: drivers a backend imports only to connect: building the backend (its connection
#: string, its error mapping) works without the driver's system library
LOADED_ON_CONNECT = frozenset({"pyodbc", "mssql_python"})


def import_driver(engine: str, driver: str | None = None,
                  extra: str | None = None) -> ModuleType:
    """Import ``engine``'s driver module (``driver``, default the engine's own), or raise
    :class:`DriverMissingError` saying what to install: the pip extra when the driver is
    absent, the system library when it is installed but cannot load."""
    _, _, default, default_extra = BACKENDS[engine]
    driver = driver or default
    extra = extra or DRIVER_EXTRAS.get(driver or "", default_extra)
    assert driver is not None, f"{engine} needs no driver"
    try:
        return importlib.import_module(driver)
    except ModuleNotFoundError as exc:
        raise DriverMissingError(
            f"the {engine} engine needs the {driver} driver, which is not installed "
            f"({exc}); install it with: pip install 'portq[{extra}]'") from None
    except ImportError as exc:
        needs = SYSTEM_LIBRARIES.get(driver, "a system library it links against")
        raise DriverMissingError(
            f"the {engine} engine's {driver} driver is installed but cannot load ({exc}); "
            f"it needs {needs}") from None


def backend_for(url: DatabaseURL, **options: Any) -> SqlBackend:
    """Build the backend for ``url``; a missing driver raises :class:`DriverMissingError`
    (for a driver in :data:`LOADED_ON_CONNECT` whose system library is missing, the first
    connection raises it instead)."""
    module_name, class_name, driver, extra = BACKENDS[url.engine]
    if url.engine == "sqlserver":   # pyodbc, or Microsoft's mssql-python (url option)
        from portq.backends.sqlserver import dbapi_module
        if dbapi_module(url) == "mssql_python":
            driver, extra = "mssql_python", "mssql-python"
    if driver is not None:
        try:
            import_driver(url.engine, driver, extra)
        except DriverMissingError as exc:
            if driver not in LOADED_ON_CONNECT or isinstance(exc.__context__,
                                                             ModuleNotFoundError):
                raise
    cls: type[SqlBackend] = getattr(importlib.import_module(module_name), class_name)
    return cls(url, **options)
