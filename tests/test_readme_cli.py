"""The README's command table says what the commands do: no row twice, the migrate message
as migrate prints it, the --idle-max default as --help states it."""

from __future__ import annotations

import re
from pathlib import Path

from portq.conformance.helpers import run_portq

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_no_command_row_appears_twice() -> None:
    rows = [line for line in README.splitlines() if line.startswith("| `portq ")]
    assert len(rows) > 10
    assert len(rows) == len(set(rows)), [r[:60] for r in rows if rows.count(r) > 1]


def test_migrate_message_is_the_documented_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    created = run_portq("migrate", url).stdout.split(" (")[0]
    again = run_portq("migrate", url).stdout.split(" (")[0]
    assert f"says `{created}`" in README and f"`{again}`" in README, (created, again)


def test_idle_max_default_matches_the_help() -> None:
    help_text = " ".join(run_portq("worker", "--help").stdout.split())
    found = re.search(r"--idle-max DURATION .*?\(default: (\S+) on PostgreSQL and SQLite.*?"
                      r"(\d+ms) elsewhere", help_text)
    assert found, help_text[help_text.find("--idle-max"):][:400]
    two, quarter = found.group(1).rstrip(","), found.group(2)
    assert two == "2s" and quarter == "250ms"
    assert "(default 2 s on PostgreSQL and SQLite, which wake it, and 250 ms elsewhere)" \
        in " ".join(README.split()).replace("`", "")
