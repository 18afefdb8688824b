"""Loading the SQL files in ``dialects/<engine>/`` and binding their ``:name`` parameters.

``queries.sql`` holds named statements::

    -- name: claim
    UPDATE portq_job SET ... WHERE queue = :queue ...;

``schema.sql`` holds numbered migrations (``-- migration: 1``) of one or more statements,
each ended by ``;`` at the end of a line, or, where a section contains a line holding only
``/``, by that line (Oracle PL/SQL blocks).

Every table, index and constraint is named ``portq_...`` in the files; the configured,
validated prefix replaces ``portq_`` when the files are loaded. Values are always bound
parameters; a list or tuple value expands ``:ids`` into ``:ids_0, :ids_1, ...``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

from portq.errors import ConfigurationError

ParamStyle = Literal["named", "pyformat", "qmark"]

PREFIX_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.M)
_MIGRATION_LINE = re.compile(r"^--\s*migration:\s*(\d+)\s*$", re.M)
# A quoted string, a comment, or a :name parameter not preceded by ':' (PostgreSQL casts).
_TOKEN = re.compile(r"'(?:[^']|'')*'|--[^\n]*|(?<![:\w]):([A-Za-z_]\w*)")


def dialects_dir() -> Path:
    """Where the SQL files live: inside the wheel, or at the repository root in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "dialects", here.parent / "dialects"):
        if candidate.is_dir():
            return candidate
    raise ConfigurationError("portq's dialects/ SQL files are missing from this installation")


def validate_prefix(prefix: str) -> str:
    """Check a table prefix is a safe SQL identifier fragment (``[a-z][a-z0-9_]{0,15}``)."""
    if not isinstance(prefix, str) or not PREFIX_PATTERN.match(prefix):
        raise ConfigurationError(
            f"invalid table prefix {prefix!r}: use 1-16 characters of [a-z0-9_], "
            "starting with a letter")
    return prefix


def _apply_prefix(sql: str, prefix: str) -> str:
    return re.sub(r"\bportq_", prefix, sql) if prefix != "portq_" else sql


@cache
def _read(engine: str, filename: str) -> str:
    path = dialects_dir() / engine / filename
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(f"no SQL file {filename} for engine {engine!r}") from None


def load_queries(engine: str, prefix: str = "portq_",
                 filename: str = "queries.sql") -> dict[str, str]:
    """Named statements of ``dialects/<engine>/queries.sql`` (or ``filename`` beside it,
    such as ``bench.sql``), with the prefix applied."""
    text = _read(engine, filename)
    out: dict[str, str] = {}
    matches = list(_NAME_LINE.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = _strip_comments(text[m.end():end]).strip()
        if m.group(1) in out:
            raise ConfigurationError(f"query {m.group(1)!r} defined twice for {engine}")
        out[m.group(1)] = _apply_prefix(body, prefix)
    return out


def load_migrations(engine: str, prefix: str = "portq_") -> list[tuple[int, list[str]]]:
    """``(version, statements)`` pairs of ``dialects/<engine>/schema.sql``, in order."""
    text = _read(engine, "schema.sql")
    matches = list(_MIGRATION_LINE.finditer(text))
    out: list[tuple[int, list[str]]] = []
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        section = _apply_prefix(_strip_comments(text[m.end():end]), prefix)
        out.append((int(m.group(1)), split_statements(section)))
    versions = [v for v, _ in out]
    if versions != sorted(set(versions)):
        raise ConfigurationError(f"migrations of {engine} are not strictly increasing")
    return out


def split_statements(section: str) -> list[str]:
    """Split a migration section into statements (see the module docstring)."""
    lines = section.splitlines()
    if any(line.strip() == "/" for line in lines):
        chunks = re.split(r"(?m)^\s*/\s*$", section)
    else:
        chunks = re.split(r";[ \t]*$", section, flags=re.M)
    return [c.strip() for c in chunks if c.strip()]


def _strip_comments(sql: str) -> str:
    """Drop whole-line ``--`` comments (kept inside statements they would be harmless)."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


@dataclass(frozen=True)
class Bound:
    """A statement rendered for one driver, with its parameters in the driver's shape."""

    sql: str
    params: Sequence[Any] | Mapping[str, Any]


@lru_cache(maxsize=1024)
def _template(sql: str, style: ParamStyle) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``sql`` cut at its ``:name`` parameters: the literal pieces (escaped for ``style``),
    one more than the parameter names, in order. Parsed once per statement and style."""
    def literal(text: str) -> str:
        return text.replace("%", "%%") if style == "pyformat" else text

    pieces, names = [], []
    text, pos = [], 0
    for m in _TOKEN.finditer(sql):
        text.append(sql[pos:m.start()])
        if m.group(1) is None:  # a string, comment or cast: no parameter in it
            text.append(m.group(0))
        else:
            pieces.append(literal("".join(text)))
            names.append(m.group(1))
            text = []
        pos = m.end()
    text.append(sql[pos:])
    pieces.append(literal("".join(text)))
    return tuple(pieces), tuple(names)


def _placeholder(name: str, style: ParamStyle) -> str:
    """Parameter ``name`` as ``style`` writes it in SQL text."""
    return "?" if style == "qmark" else f"%({name})s" if style == "pyformat" else f":{name}"


@lru_cache(maxsize=1024)
def _scalar_sql(sql: str, style: ParamStyle) -> str:
    """``sql`` rendered for ``style`` when no parameter is a list: the same text each
    call (so a driver's statement cache finds it by a hash computed once)."""
    pieces, names = _template(sql, style)
    rendered = [pieces[0]]
    for name, piece in zip(names, pieces[1:], strict=True):
        rendered += (_placeholder(name, style), piece)
    return "".join(rendered)


def bind(sql: str, params: Mapping[str, Any], style: ParamStyle) -> Bound:
    """Render ``:name`` parameters in ``style``; expand sequence values into lists."""
    pieces, names = _template(sql, style)
    try:
        values = [params[name] for name in names]
    except KeyError as exc:
        raise KeyError(f"SQL parameter :{exc.args[0]} was not given") from None
    if not any(isinstance(v, list | tuple) for v in values):
        return Bound(_scalar_sql(sql, style), values if style == "qmark" else
                     dict(zip(names, values, strict=True)))
    named: dict[str, Any] = {}
    ordered: list[Any] = []

    def one(name: str, value: Any) -> str:
        if style == "qmark":
            ordered.append(value)
        else:
            named[name] = value
        return _placeholder(name, style)

    rendered = [pieces[0]]
    for name, value, piece in zip(names, values, pieces[1:], strict=True):
        if isinstance(value, list | tuple):
            if not value:
                raise ValueError(f"SQL list parameter :{name} is empty")
            rendered.append(", ".join(one(f"{name}_{i}", v) for i, v in enumerate(value)))
        else:
            rendered.append(one(name, value))
        rendered.append(piece)
    return Bound("".join(rendered), ordered if style == "qmark" else named)
