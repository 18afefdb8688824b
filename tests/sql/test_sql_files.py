"""The SQL-file layer: every engine defines the same statements; binding is exact."""

from __future__ import annotations

import re

import pytest

from portq.engines import NAMES
from portq.errors import ConfigurationError
from portq.sql import bind, dialects_dir, load_migrations, load_queries, validate_prefix

ENGINES = list(NAMES)
# engine-specific extras
OPTIONAL = {"migration_lock", "notify", "insert_jobs_bulk", "server_identity",
            "backend_pid"}


def _available() -> list[str]:
    return [e for e in ENGINES if (dialects_dir() / e / "queries.sql").exists()]


@pytest.mark.parametrize("engine", _available())
def test_every_engine_defines_the_protocols_statements(engine: str) -> None:
    reference = set(load_queries("postgres")) - OPTIONAL
    assert reference <= set(load_queries(engine)), reference - set(load_queries(engine))


@pytest.mark.parametrize("engine", _available())
def test_migrations_are_numbered_and_prefixed(engine: str) -> None:
    migrations = load_migrations(engine, prefix="acme_")
    versions = [v for v, _ in migrations]
    # strictly increasing from 1; gaps allowed (numbers are allocated per branch, and
    # migrate() applies every version not yet recorded)
    assert versions[0] == 1 and versions == sorted(set(versions)), versions
    text = "\n".join(s for _, stmts in migrations for s in stmts)
    assert "portq_" not in text and "acme_job" in text


def test_bind_styles() -> None:
    sql = "SELECT x::int, '50%:a' FROM t WHERE a = :a AND b IN (:ids) AND c = :a"
    named = bind(sql, {"a": 1, "ids": [7, 8]}, "named")
    assert named.sql == "SELECT x::int, '50%:a' FROM t WHERE a = :a AND b IN (:ids_0, :ids_1) " \
                        "AND c = :a"
    assert named.params == {"a": 1, "ids_0": 7, "ids_1": 8}
    py = bind(sql, {"a": 1, "ids": (7, 8)}, "pyformat")
    assert py.sql == ("SELECT x::int, '50%%:a' FROM t WHERE a = %(a)s AND b IN "
                      "(%(ids_0)s, %(ids_1)s) AND c = %(a)s")
    q = bind(sql, {"a": 1, "ids": [7, 8]}, "qmark")
    assert q.sql == "SELECT x::int, '50%:a' FROM t WHERE a = ? AND b IN (?, ?) AND c = ?"
    assert q.params == [1, 7, 8, 1]


def test_bind_rejects_missing_and_empty_lists() -> None:
    with pytest.raises(KeyError, match=":b"):
        bind("SELECT :b", {}, "named")
    with pytest.raises(ValueError, match="empty"):
        bind("SELECT 1 WHERE x IN (:ids)", {"ids": []}, "qmark")


@pytest.mark.parametrize("prefix", ["", "Portq_", "1abc", "a-b", "a;drop", "x" * 17, "a b"])
def test_prefix_must_be_a_plain_identifier(prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid table prefix"):
        validate_prefix(prefix)


def test_replay_budget_is_one_expression_on_every_engine() -> None:
    """``retry_dead`` adds the extra attempts to the budget (not to the attempts spent),
    saturating at the largest INT, in the same words on every engine: the live engines
    check the result (conformance/test_retries.py); this holds SQL Server and Oracle,
    which have no server here, to the same expression."""
    budgets = {}
    for engine in _available():
        sql = " ".join(load_queries(engine)["retry_dead"].split())
        found = re.search(r"max_attempts = (.*? END)", sql)
        assert found, f"{engine}: retry_dead does not set max_attempts"
        budgets[engine] = found.group(1)
    assert set(budgets.values()) == {
        "max_attempts + CASE WHEN :extra < 2147483647 - max_attempts THEN :extra "
        "ELSE 2147483647 - max_attempts END"}, budgets
