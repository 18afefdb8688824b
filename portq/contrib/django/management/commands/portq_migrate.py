"""``manage.py portq_migrate [--backend ALIAS]``: create or upgrade portq's tables."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portq.contrib.django.management.commands._common import portq_backend
from portq.errors import PortqError


class Command(BaseCommand):  # type: ignore[misc]
    help = "Create or upgrade portq's tables in the database of a portq TASKS backend."
    # as Django's migrate: the system checks would warn that the tables are missing
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="the TASKS alias of the portq backend (default: default)")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = portq_backend(options["backend"])
        try:
            url = backend.queue_url
            version = backend.queue.migrate()
        except PortqError as exc:
            raise CommandError(str(exc)) from None
        finally:
            backend.close()
        self.stdout.write(f"portq schema at version {version} on {url}")
