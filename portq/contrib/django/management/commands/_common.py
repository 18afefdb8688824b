"""What both portq management commands share: finding the portq task backend."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTaskBackend

from portq.contrib.django.backend import PortqBackend


def portq_backend(alias: str) -> PortqBackend:
    """The ``TASKS[alias]`` backend, which must be a :class:`PortqBackend` (else exit 2)."""
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        raise CommandError(f"no TASKS backend {alias!r}: {exc}", returncode=2) from None
    if not isinstance(backend, PortqBackend):
        raise CommandError(f"TASKS[{alias!r}] is {type(backend).__module__}."
                           f"{type(backend).__name__}, not portq.contrib.django.PortqBackend",
                           returncode=2)
    return backend
