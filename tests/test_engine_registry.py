"""One engine registry (portq/engines.py): every engine list reads it, and docs/architecture.md's
"Adding an engine" names exactly the places an engine touches, each present for every engine."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

from portq import engines, sqla, url
from portq.backends import BACKENDS
from portq.conformance import containers, plugin
from portq.engines import ENGINES, NAMES

ROOT = Path(__file__).resolve().parent.parent


def _adding_an_engine() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Adding an engine", 1)[1]
    return section.split("\n## ", 1)[0]


def _places() -> list[str]:
    """The paths the section's list items start with."""
    return re.findall(r"^- `([^`]+)`", _adding_an_engine(), re.MULTILINE)


def test_the_section_lists_the_registry_first_and_every_per_engine_file() -> None:
    places = _places()
    assert places[0] == "portq/engines.py"
    assert {"dialects/<engine>/schema.sql", "dialects/<engine>/queries.sql",
            "portq/backends/<engine>.py", "pyproject.toml", "compose/docker-compose.yml",
            "compose/run-conformance.sh", "docs/engines.md",
            "portq/conformance/containers.py"} <= set(places)


@pytest.mark.parametrize("engine", ENGINES, ids=NAMES)
def test_every_listed_place_exists_for_every_engine(engine: engines.Engine) -> None:
    for place in _places():
        path = ROOT / place.replace("<engine>", engine.name)
        assert path.is_file(), f"{engine.name}: {place} -> {path} is missing"
    assert engine.dialect_dir == f"dialects/{engine.name}"
    assert engine.backend_module == f"portq.backends.{engine.name}"
    cls = getattr(importlib.import_module(engine.backend_module), engine.backend_class)
    assert cls.engine == engine.name
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert engine.extra in extras
    if engine.driver is not None:
        assert any(req.lower().startswith(engine.driver) for req in extras[engine.extra]), \
            extras[engine.extra]
    compose = (ROOT / "compose" / "docker-compose.yml").read_text()
    for service in engine.compose_services:
        assert re.search(rf"^  {re.escape(service)}:$", compose, re.MULTILINE), service
    urls = re.findall(r'^  "([a-z]+)://', (ROOT / "compose" / "run-conformance.sh").read_text(),
                      re.MULTILINE)
    assert bool(engine.compose_services) == any(u in engine.schemes for u in urls), urls
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "engines.md").read_text(),
                          re.MULTILINE)
    assert any(h.startswith(engine.label.split("/")[0]) for h in headings), engine.label


def test_every_reader_covers_every_engine_and_nothing_else() -> None:
    assert set(BACKENDS) == set(NAMES)
    assert set(url.ENGINES.values()) == set(NAMES) == set(url.DRIVERS)
    assert set(plugin.ENGINE_LABELS) == set(NAMES)
    assert set(containers.IMAGES) == {e.name for e in ENGINES if e.image} == \
        set(containers._STARTERS)
    assert set(sqla.DIALECT_ENGINES.values()) == set(NAMES)
    assert len(engines.DJANGO_VENDORS) == len(NAMES)
    for engine in ENGINES:
        for scheme in engine.schemes:
            assert url.parse_url(f"{scheme}://u@h/db" if engine.name != "sqlite" else
                                 f"{scheme}:///x.db").engine == engine.name
    assert (ROOT / "dialects").is_dir()
    assert sorted(p.name for p in (ROOT / "dialects").iterdir() if p.is_dir()) == \
        sorted(NAMES)


def test_an_unknown_engine_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="portq's engines: sqlite, postgres, mysql"):
        engines.engine("db2")
