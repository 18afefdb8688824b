"""The one set of worker options both fronts take, validated once, and the sizes the
runtime derives from them and from the engine's capabilities."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from portq.durations import seconds_of
from portq.errors import ConfigurationError
from portq.queue import duration_ms, positive_int, validate_worker_id
from portq.registry import DEFAULT_REGISTRY_INTERVAL
from portq.retry import Backoff
from portq.runtime.middleware import Middleware
from portq.runtime.pacing import AUTO_CLAIMERS, LOOKAHEAD_PER_CLAIMER, claim_batch

if TYPE_CHECKING:
    from portq.protocol import Backend

#: options kept for one release; each warns and is honoured as before
DEPRECATED = ("prefetch", "ack_delay", "claimers", "heartbeat")


@dataclass(frozen=True)
class WorkerOptions:
    """Every option of :class:`portq.Worker` and :class:`portq.aio.AsyncWorker` (the same
    names, defaults and checks for both). Durations are seconds (or a timedelta, or text
    such as ``'30s'`` for ``job_timeout``)."""

    concurrency: int = 4
    lease: float = 30.0
    batch: int | None = None
    backoff: Backoff | None = None
    idle_min: float = 0.05
    idle_max: float | None = None
    reap_interval: float | None = 10.0
    reap_delay: float = 1.0
    prune_interval: float | None = 3600.0
    prune_older_than: float = 7 * 86400.0
    grace: float = 30.0
    burst: bool = False
    worker_id: str | None = None
    install_signals: bool = False
    listen: bool = True
    registry_interval: float | None = DEFAULT_REGISTRY_INTERVAL
    #: the longest an attempt may run when its job sets no timeout (None: no limit)
    job_timeout: Any = None
    #: middleware around every handler call, outermost first (portq.runtime.middleware)
    middleware: Sequence[Middleware] | None = None
    # deprecated: the worker sizes these itself
    prefetch: int | None = None
    ack_delay: float | None = None
    claimers: int | None = None
    heartbeat: bool = True

    @classmethod
    def of(cls, front: str, options: dict[str, Any]) -> WorkerOptions:
        """The options passed to ``front`` (a class name, for errors), checked: an unknown
        name is a :class:`ConfigurationError` naming it and the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigurationError(f"{front}() got unknown option(s) {', '.join(unknown)}; "
                                     f"known: {', '.join(sorted(known))}")
        used = [name for name in DEPRECATED if name in options and
                options[name] != getattr(cls, name)]
        if used:
            warnings.warn(f"{front} {', '.join(used)}: deprecated, the worker sizes its "
                          "look-ahead, completion batches and claim loops itself and always "
                          "renews leases; pass only concurrency and lease",
                          DeprecationWarning, stacklevel=3)
        return cls(**options)


@dataclass
class Settings:
    """:class:`WorkerOptions` resolved against one engine: every value checked, every size
    derived. Made by :func:`settle`."""

    options: WorkerOptions
    concurrency: int
    lease: float
    lease_ms: int
    idle_min: float
    idle_max: float
    grace: float
    job_timeout: float | None
    #: the main claim loop also writes every outcome, so that one thread writes at a time
    #: (the engine's single write lock: SQLite), unless claimers/ack_delay are fixed
    single_writer: bool
    claimers: int
    auto_lookahead: bool
    prefetch: int
    capacity: int
    batch: int
    ack_delay: float


def settle(options: WorkerOptions, backend: Backend) -> Settings:
    """Check ``options`` and derive the runtime's sizes for ``backend``'s engine."""
    o = options
    if backend.capabilities.in_memory:
        raise ConfigurationError(
            "sqlite://:memory: cannot be shared by a worker's connections or processes; "
            "use a file, e.g. sqlite:///portq.db")
    concurrency = positive_int(o.concurrency, "concurrency")
    lease_ms = duration_ms(o.lease, "lease")
    for what, value in (("reap_interval", o.reap_interval), ("prune_interval",
                                                            o.prune_interval),
                        ("registry_interval", o.registry_interval)):
        if value is not None:
            duration_ms(value, what)
    duration_ms(o.reap_delay, "reap_delay", allow_zero=True)
    duration_ms(o.prune_older_than, "prune_older_than", allow_zero=True)
    duration_ms(o.grace, "grace", allow_zero=True)
    idle_max = o.idle_max
    if idle_max is None:  # the engine's: short where only polling finds new jobs
        idle_max = max(o.idle_min, backend.capabilities.idle_max_default)
    if isinstance(o.idle_min, bool) or not isinstance(o.idle_min, int | float) or \
            isinstance(idle_max, bool) or not isinstance(idle_max, int | float) or \
            not 0 < o.idle_min <= idle_max:
        raise ConfigurationError(f"need 0 < idle_min <= idle_max, got idle_min={o.idle_min!r}"
                                 f", idle_max={idle_max!r}")
    if o.worker_id is not None:
        validate_worker_id(o.worker_id)
    job_timeout = None if o.job_timeout is None else seconds_of(o.job_timeout, "job_timeout")
    if job_timeout is not None and job_timeout <= 0:
        raise ConfigurationError(f"job_timeout must be > 0, got {o.job_timeout!r}")
    if o.ack_delay is not None:
        duration_ms(o.ack_delay, "ack_delay", allow_zero=True)
    single_writer = backend.capabilities.single_writer and o.claimers is None and \
        o.ack_delay is None
    claimers = positive_int(o.claimers, "claimers") if o.claimers is not None else \
        1 if single_writer else min(concurrency, AUTO_CLAIMERS)
    auto_lookahead = o.prefetch is None
    prefetch = positive_int(o.prefetch, "prefetch", allow_zero=True) \
        if o.prefetch is not None else LOOKAHEAD_PER_CLAIMER * claimers
    capacity = concurrency + prefetch
    batch = claim_batch(capacity if o.batch is None and not auto_lookahead else o.batch,
                        concurrency, capacity, one_writing_loop=single_writer)
    return Settings(options=o, concurrency=concurrency, lease=lease_ms / 1000,
                    lease_ms=lease_ms, idle_min=float(o.idle_min), idle_max=float(idle_max),
                    grace=float(o.grace), job_timeout=job_timeout,
                    single_writer=single_writer, claimers=claimers,
                    auto_lookahead=auto_lookahead, prefetch=prefetch, capacity=capacity,
                    batch=batch, ack_delay=o.ack_delay or 0.0)
