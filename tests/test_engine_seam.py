"""The engine seam is declared (issue 28 item 1): engine modules override only the hooks
:class:`EngineHooks` names, the runtime reads only what :class:`Backend` declares, and the
shared SQL machinery stays in modules of a few hundred lines."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from portq.backends import BACKENDS, backend_for
from portq.backends.contract import EngineHooks
from portq.backends.sql import SqlBackend
from portq.protocol import Backend
from portq.url import parse_url

PORTQ = Path(__file__).resolve().parent.parent / "portq"
HOOKS = {n for n in dir(EngineHooks) if not n.startswith("_")} | set(EngineHooks.__annotations__)


def engine_class(engine: str) -> type[SqlBackend]:
    module, name, _, _ = BACKENDS[engine]
    cls: type[SqlBackend] = getattr(importlib.import_module(module), name)
    return cls


@pytest.mark.parametrize("engine", sorted(BACKENDS))
def test_engine_modules_override_only_declared_hooks(engine: str) -> None:
    cls = engine_class(engine)
    overrides = {n for n in vars(cls) if not n.startswith("_") and hasattr(SqlBackend, n)}
    assert overrides, engine
    assert overrides <= HOOKS, f"{engine} overrides undeclared hooks: {overrides - HOOKS}"


def test_every_hook_has_a_default_or_is_an_engine_fact() -> None:
    facts = {"engine", "paramstyle", "driver_module"}  # each engine states its own
    assert {h for h in HOOKS if not hasattr(SqlBackend, h)} == facts
    for engine in BACKENDS:
        cls = engine_class(engine)
        assert all(isinstance(getattr(cls, f), str) for f in facts), engine


def _backend_reads(path: Path) -> set[str]:
    """The attributes read from anything named ``backend`` (``x.backend.y``, ``backend.y``),
    outside :func:`portq.connect` (the factory that builds the SQL backend)."""
    tree = ast.parse(path.read_text())
    tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef)
                                              and n.name == "connect")]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "backend") or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "backend"):
                names.add(node.attr)
    return names


RUNTIME = sorted([*(PORTQ / "runtime").glob("*.py"), PORTQ / "worker.py", PORTQ / "queue.py",
                  PORTQ / "operators.py", PORTQ / "registry.py"])


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: p.name)
def test_runtime_reads_only_the_contract(path: Path) -> None:
    declared = set(dir(Backend)) | set(Backend.__annotations__)
    undeclared = _backend_reads(path) - declared
    assert not undeclared, f"{path.name} reads undeclared backend attributes: {undeclared}"


def test_capabilities_differ_only_where_engines_do(tmp_path: Path) -> None:
    sqlite = backend_for(parse_url(f"sqlite:///{tmp_path / 'x.db'}")).capabilities
    assert sqlite.single_writer and not sqlite.row_locking and sqlite.listen_mode == "polling"
    memory = backend_for(parse_url("sqlite:///:memory:")).capabilities
    assert memory.in_memory
    for engine in ("postgres", "mysql", "oracle"):
        cls = engine_class(engine)
        assert not cls.single_writer, engine


def test_sql_modules_stay_small() -> None:
    for path in [*(PORTQ / "backends" / "sql").glob("*.py"), PORTQ / "backends" / "contract.py"]:
        lines = len(path.read_text().splitlines())
        assert lines <= 400, f"{path.name}: {lines} lines"
