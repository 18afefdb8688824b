"""The plan of a claim: each engine's EXPLAIN output read into one :class:`ClaimPlan` (node
types, whether the ready index is walked in order, the engine's own time). Which reader an
engine's plan needs is in its registry record (``Engine.bench_plan``); the EXPLAIN words
are its dialect's ``bench_explain`` / ``bench_explain_analyze``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from portq.backends.base import SqlBackend
from portq.bench.table import CLAIM_LIMIT, claim_params, server_version, statement
from portq.engines import engine as engine_record
from portq.errors import ConfigurationError
from portq.sql import split_statements


@dataclass
class ClaimPlan:
    """The engine's plan of one claim: node types, ordered index walk, engine time."""

    engine: str
    nodes: list[str]
    ordered_walk: bool
    server_ms: float | None = None
    buffers: int | None = None
    text: str = field(default="", repr=False)


def explain_claim(backend: SqlBackend, queue: str, *, limit: int = CLAIM_LIMIT,
                  analyze: bool = True) -> ClaimPlan:
    """Plan the backend's own claim statement (its locking SELECT on MySQL/MariaDB) for
    one queue; with ``analyze`` the statement runs, in a transaction rolled back."""
    reader = READERS.get(engine_record(backend.engine).bench_plan or "")
    explain = statement(backend, "explain_analyze" if analyze else "explain")
    if reader is None or explain is None:
        raise ConfigurationError(f"portq bench has no plan reader for {backend.engine}")
    # the first statement of a multi-statement claim is the one that picks the rows
    claim_sql = split_statements(backend.queries["claim"])[0]
    index = f"{backend.prefix}job_ready_idx"
    with backend.transaction(commit=False) as cur:
        if analyze and not _analyzes(backend, cur):
            explain = str(statement(backend, "explain"))
        rows = backend.execute(cur, f"{explain} {claim_sql}",
                               claim_params(queue, limit)).fetchall()
        return reader(rows, index)


def _analyzes(backend: SqlBackend, cur: Any) -> bool:
    """False on MySQL, whose EXPLAIN has no ANALYZE FORMAT=JSON (MariaDB's has)."""
    if "ANALYZE FORMAT=JSON" not in str(statement(backend, "explain_analyze")):
        return True
    return "mariadb" in server_version(backend, cur).lower()


def _sqlite_plan(rows: list[Any], index: str) -> ClaimPlan:
    details = [str(r[3]) for r in rows]
    walk = any(index in d for d in details) and not any("TEMP B-TREE" in d for d in details)
    return ClaimPlan("sqlite", details, walk, text="\n".join(details))


def _postgres_plan(rows: list[Any], index: str) -> ClaimPlan:
    doc = rows[0][0]
    top = (json.loads(doc) if isinstance(doc, str) else doc)[0]
    nodes: list[str] = []
    walk = False

    def visit(node: dict[str, Any]) -> None:
        nonlocal walk
        kind = str(node["Node Type"])
        if node.get("Index Name"):
            nodes.append(f"{kind} ({node['Index Name']})")
            walk = walk or (kind in ("Index Scan", "Index Only Scan")
                            and node["Index Name"] == index)
        else:
            nodes.append(kind)
        for child in node.get("Plans", []):
            visit(child)
    visit(top["Plan"])
    sort = any(n.split(" (")[0] in ("Sort", "Incremental Sort") for n in nodes)
    plan = top["Plan"]
    buffers = None
    if "Shared Hit Blocks" in plan:
        buffers = int(plan["Shared Hit Blocks"]) + int(plan.get("Shared Read Blocks", 0))
    return ClaimPlan("postgres", nodes, walk and not sort, top.get("Execution Time"),
                     buffers, json.dumps(top, indent=1))


def _mysql_plan(rows: list[Any], index: str) -> ClaimPlan:
    doc = str(rows[0][0])
    nodes: list[str] = []
    keys: list[str] = []
    sorts = False

    def visit(value: Any) -> None:
        nonlocal sorts
        if isinstance(value, dict):
            for k, v in value.items():
                if k in ("filesort", "temporary_table") or (k == "using_filesort" and v):
                    sorts = True
                    nodes.append(k)
                if k == "table" and isinstance(v, dict) and "table_name" in v:
                    keys.append(str(v.get("key")))
                    nodes.append(f"{v.get('access_type')} {v['table_name']} ({v.get('key')})")
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)
    parsed = json.loads(doc)
    visit(parsed)
    block = parsed.get("query_block", {})
    server_ms = block.get("r_total_time_ms")
    return ClaimPlan("mysql", nodes, index in keys and not sorts,
                     None if server_ms is None else float(server_ms), None,
                     json.dumps(parsed, indent=1))



#: ``Engine.bench_plan`` -> the reader of that plan output
READERS: dict[str, Callable[[list[Any], str], ClaimPlan]] = {
    "postgres-json": _postgres_plan, "sqlite-query-plan": _sqlite_plan,
    "mysql-json": _mysql_plan}
