"""Issue 28's size limits, checked statically: every library module under portq/ stays
within 600 lines, every class within 400 and every function within 80 (lines from its
``def``/``class`` to its end, as :mod:`ast` gives them). The conformance suite's test
files (``portq/conformance/test_*.py``) are exempt."""

from __future__ import annotations

import ast
from pathlib import Path

PORTQ = Path(__file__).resolve().parent.parent / "portq"
MODULE_LINES, CLASS_LINES, FUNCTION_LINES = 600, 400, 80


def library_modules() -> list[Path]:
    """Every module of the library, the conformance suite's test files aside."""
    return sorted(p for p in PORTQ.rglob("*.py")
                  if not (p.parent.name == "conformance" and p.name.startswith("test_")))


def oversized(path: Path, root: Path = PORTQ.parent) -> list[str]:
    """The module, classes and functions of ``path`` over their limit, one line each
    (named relative to ``root``)."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(root).as_posix()
    found = []
    lines = len(text.splitlines())
    if lines > MODULE_LINES:
        found.append(f"{name}: module of {lines} lines (limit {MODULE_LINES})")
    for node in ast.walk(ast.parse(text, filename=name)):
        if isinstance(node, ast.ClassDef):
            kind, limit = "class", CLASS_LINES
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kind, limit = "function", FUNCTION_LINES
        else:
            continue
        size = (node.end_lineno or node.lineno) - node.lineno + 1
        if size > limit:
            found.append(f"{name}:{node.lineno}: {kind} {node.name} of {size} lines "
                         f"(limit {limit})")
    return found


def test_library_modules_classes_and_functions_stay_within_the_limits() -> None:
    modules = library_modules()
    assert len(modules) > 100 and PORTQ / "queue.py" in modules
    offenders = [line for path in modules for line in oversized(path)]
    assert not offenders, "over issue 28's size limits:\n" + "\n".join(offenders)


def test_the_check_names_what_is_over(tmp_path: Path) -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(FUNCTION_LINES))  # f: 81 lines
    fake = tmp_path / "portq" / "x.py"
    fake.parent.mkdir()
    fake.write_text("class Small:\n    def f(self) -> None:\n" + body + "\n" * 600)
    assert oversized(fake, tmp_path) == [
        f"portq/x.py: module of {FUNCTION_LINES + 602} lines (limit {MODULE_LINES})",
        f"portq/x.py:2: function f of {FUNCTION_LINES + 1} lines (limit {FUNCTION_LINES})"]
    fake.write_text("class Big:\n" + "".join(f"    y{i} = {i}\n" for i in range(CLASS_LINES)))
    assert oversized(fake, tmp_path) == [
        f"portq/x.py:1: class Big of {CLASS_LINES + 1} lines (limit {CLASS_LINES})"]


def test_the_conformance_test_files_alone_are_exempt() -> None:
    names = {p.relative_to(PORTQ).as_posix() for p in library_modules()}
    assert "conformance/test_worker.py" not in names
    assert {"conformance/runner.py", "conformance/properties.py"} <= names
