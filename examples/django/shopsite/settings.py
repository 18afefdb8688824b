"""Settings of the example shop: one database per engine reachable, one portq TASKS backend
on each (aliases "default" = SQLite, "pg" = PostgreSQL, "mysql" = MariaDB/MySQL).

Environment: PORTQ_DJANGO_SQLITE (the SQLite file, default shop.sqlite3 here),
PORTQ_TEST_PG_URL / PORTQ_TEST_MYSQL_URL (postgresql://user@host:port/db,
mysql://user@host:port/db; the database is used only when its variable is set).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import portq

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["portq.contrib.django", "shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _server(engine: str, url: str) -> dict[str, object]:
    parts = urlsplit(url)
    return {"ENGINE": engine, "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""), "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "", "PORT": str(parts.port or "")}


DATABASES: dict[str, dict[str, object]] = {"default": {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": os.environ.get("PORTQ_DJANGO_SQLITE", str(BASE_DIR / "shop.sqlite3")),
}}
if os.environ.get("PORTQ_TEST_PG_URL"):
    DATABASES["pg"] = _server("django.db.backends.postgresql", os.environ["PORTQ_TEST_PG_URL"])
if os.environ.get("PORTQ_TEST_MYSQL_URL"):
    # Django's MySQL backend imports MySQLdb (mysqlclient, which needs libmariadb-dev to
    # build); PyMySQL stands in for it here, announcing the mysqlclient version Django wants
    import pymysql

    pymysql.version_info = (2, 2, 1, "final", 0)
    pymysql.install_as_MySQLdb()
    DATABASES["mysql"] = _server("django.db.backends.mysql",
                                 os.environ["PORTQ_TEST_MYSQL_URL"])

# retries: 2 attempts, 0.2 s apart (portq's own retries; Django has none)
TASKS = {alias: {"BACKEND": "portq.contrib.django.PortqBackend",
                 "QUEUES": ["default", "emails"],
                 "OPTIONS": {"database": alias, "prefix": "djq_", "max_attempts": 2,
                             "backoff": portq.Backoff("fixed", 0.2)}}
         for alias in DATABASES}
