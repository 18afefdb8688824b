"""``portq migrate``: create or upgrade portq's tables."""

from __future__ import annotations

import argparse

from portq.cli.common import Commands, emit, open_queue


def cmd_migrate(args: argparse.Namespace) -> int:
    with open_queue(args, create=True) as q:
        before = q.backend.schema_version()
        after = q.migrate()
        url = q.url
    if after == before:
        text = f"schema already at v{after}"
    elif before == 0:
        text = f"created schema v{after}"
    else:
        text = f"upgraded schema from v{before} to v{after}"
    emit(args, {"url": url, "prefix": args.prefix, "before": before, "version": after,
                "changed": after != before}, f"{text} ({url}, prefix {args.prefix})")
    return 0


def add_migrate(cmds: Commands) -> None:
    cmds.command("migrate", cmd_migrate, "create or upgrade portq's tables; says which")
