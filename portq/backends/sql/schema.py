"""The schema: migrations, the recorded version, the tables of a prefix, and what the
server reports about itself."""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar

from portq.backends.contract import ErrorKind
from portq.backends.sql.common import driver_version
from portq.backends.sql.tx import Transactions
from portq.errors import DatabaseError, SchemaError, SchemaMissingError
from portq.job import ServerInfo
from portq.sql import load_migrations

log = logging.getLogger("portq.backend")
_CREATED_TABLE = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", re.IGNORECASE)


class _MissingSchema(Exception):
    """The version table is not there (raised inside :meth:`Schema.schema_version`)."""


class Schema(Transactions):
    """Migrations and the tables of a prefix."""

    # ---- schema -------------------------------------------------------------------------

    def migrate(self) -> int:
        def go(cur: Any) -> int:
            with self.migration_lock(cur):
                self.create_version_table(cur)
                applied = self._applied_versions(cur)
                for version, statements in load_migrations(self.engine, self.prefix):
                    if version in applied:
                        continue
                    for stmt in statements:
                        self.run_ddl(cur, stmt)
                    self.record_version(cur, version)
                    log.info("migrated %s schema to version %d", self.engine, version)
                    applied.add(version)
                return max(applied, default=0)
        return self.run("migrate", go, retry=False)

    def create_version_table(self, cur: Any) -> None:
        """Create the schema-version table if it is missing (idempotent)."""
        self.execute(cur, "create_version_table")

    def run_ddl(self, cur: Any, statement: str) -> None:
        """Run one statement of a migration."""
        cur.execute(statement)

    def record_version(self, cur: Any, version: int) -> None:
        """Record that migration ``version`` has been applied."""
        self.execute(cur, "record_version", {"version": version})

    def _applied_versions(self, cur: Any) -> set[int]:
        return {int(row[0]) for row in self.execute(cur, "applied_versions").fetchall()}

    def _read_version(self, cur: Any) -> int:
        row = self.execute(cur, "schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def schema_version(self) -> int:
        def go(cur: Any) -> int:
            try:
                return self._read_version(cur)
            except Exception as exc:
                if self.classify(exc) is ErrorKind.CONNECTION:
                    raise
                raise _MissingSchema from exc
        try:
            return self.run("schema_version", go, retry=False, write=False)
        except _MissingSchema:
            return 0

    def latest_version(self) -> int:
        return load_migrations(self.engine, self.prefix)[-1][0]

    def check_schema(self) -> None:
        """Raise :class:`SchemaError` unless the schema is at this portq's version."""
        have, want = self.schema_version(), self.latest_version()
        if have == 0:
            raise SchemaMissingError(self.missing_schema_message())
        if have != want:
            raise SchemaError(
                f"{self.url.redacted()} has portq schema version {have}, this portq needs "
                f"{want}: run `portq migrate URL`")
        applied = self.run("applied_versions", self._applied_versions, retry=False,
                           write=False)
        missing = [v for v, _ in load_migrations(self.engine, self.prefix) if v not in applied]
        if missing:
            raise SchemaError(
                f"{self.url.redacted()} lacks portq migration(s) {missing} (added below its "
                f"newest version {have}): run `portq migrate URL`")

    def server_info(self) -> ServerInfo:
        try:
            version, isolation = self.run("server_info", lambda cur: self.execute(
                cur, "server_info").fetchone(), write=False)
        except Exception as exc:
            # an engine whose isolation query may be refused (a permission) has a
            # version-only statement: the version is still worth showing
            if "server_version" not in self.queries or isinstance(exc, DatabaseError) or \
                    self.classify(exc) is ErrorKind.CONNECTION:
                raise
            (version,) = self.run("server_version", lambda cur: self.execute(
                cur, "server_version").fetchone(), write=False)
            isolation = None
        return self.make_server_info(version, isolation)

    def make_server_info(self, version: Any, isolation: Any) -> ServerInfo:
        name = self.driver_module
        return ServerInfo(engine=self.engine, server_version=str(version), driver=name,
                          driver_version=driver_version(name),
                          isolation=None if isolation is None else
                          str(isolation).replace("-", " ").upper())

    def table_names(self) -> list[str]:
        """This prefix's tables, in creation order (the version table first)."""
        texts = [self.queries["create_version_table"]]
        texts += [s for _, statements in load_migrations(self.engine, self.prefix)
                  for s in statements]
        names: list[str] = []
        for text in texts:
            for name in _CREATED_TABLE.findall(text):
                if name not in names:
                    names.append(name)
        return names

    def existing_tables(self) -> list[str]:
        """Which of this prefix's tables exist, in creation order."""
        return self.run("existing_tables", lambda cur: [
            name for name in self.table_names()
            if self.execute(cur, "table_exists", {"name": name}).fetchone() is not None],
            write=False)

    #: how this engine drops one table (Oracle: PURGE, not into the recycle bin)
    drop_table_sql: ClassVar[str] = "DROP TABLE {name}"

    def drop_schema(self) -> list[str]:
        existing = self.existing_tables()

        def go(cur: Any) -> list[str]:
            for name in reversed(existing):
                cur.execute(self.drop_table_sql.format(name=name))
            return existing
        return self.run("drop_schema", go, retry=False)

