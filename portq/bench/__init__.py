"""``portq bench``: what a claim costs as the table grows, and how fast jobs flow.

Scenarios (each measures and reports; none passes or fails):

* ``claim-latency`` (:mod:`.claims`) — fills a dedicated ``portqb_`` table set with 3 queues
  of ready jobs (plus finished jobs up to the total), then runs the backend's own claim
  statement of :data:`CLAIM_LIMIT` jobs from one queue inside a transaction that is rolled
  back, so nothing is consumed. Reports the client-side time of the claim, the engine's
  own execution time where its plan output has one, the plan's node types, and whether
  the plan walks the ready index in order (:mod:`.plans`).
* ``throughput`` (:mod:`.flow`) — a no-op handler run by :class:`portq.worker.Worker`
  threads over N jobs; jobs/s of claim + complete, for each worker count and claim batch
  size, with the Worker as a user gets it. Each run starts from a settled table; with
  ``repeat`` every configuration runs that many times and the median run is reported.
* ``enqueue`` — jobs/s of :meth:`Queue.enqueue` one at a time and of
  :meth:`Queue.enqueue_many` in chunks.
* ``pickup`` (only when asked for) — an idle Worker with its default idle settings: the
  time from ``enqueue()`` returning to the handler starting, and what the idle worker
  costs the database.

Every statement it runs beyond the backend's own comes from ``dialects/<engine>/bench.sql``
(:mod:`.table`); what differs per engine otherwise is in its registry record
(:mod:`portq.engines`). :mod:`.raw` and :mod:`.processes` serve the peer report in
``benchmarks/``. The ``portqb_`` tables are dropped afterwards.
"""

from __future__ import annotations

from portq.bench.ceiling import CEILING_FRONTS, sleep_ceiling
from portq.bench.claims import (
                                DEFAULT_SIZES,
                                KEYED_JOBS,
                                KEYS,
                                LIMITED_MAX_RUNNING,
                                claim_latency,
                                time_claim,
)
from portq.bench.cpu import (
                                CORE_BOUND_PCT,
                                CPU_BOUND_PCT,
                                METER_SAMPLE_S,
                                CpuMeter,
                                cpu_bound,
                                meter,
)
from portq.bench.flow import (
                                BULK_CHUNK,
                                DEFAULT_BATCHES,
                                DEFAULT_JOBS,
                                DEFAULT_MODES,
                                DEFAULT_WORKERS,
                                MODES,
                                PICKUP_AFTER_QUIET,
                                PICKUP_GAP_S,
                                PICKUP_JOBS,
                                PICKUP_QUIET_S,
                                RUN_OPTIONS,
                                async_throughput_run,
                                bulk_enqueue,
                                clear_queue,
                                enqueue_rates,
                                mode_options,
                                percentile,
                                pickup,
                                throughput,
                                throughput_run,
)
from portq.bench.plans import ClaimPlan, explain_claim
from portq.bench.processes import (
                                GROWTH_READY,
                                GROWTH_ROWS,
                                SAMPLE_S,
                                growth,
                                process_bound,
                                processes_run,
                                processes_sweep,
)
from portq.bench.raw import RAW_COMPLETES, complete_claim_sql, raw_completes, raw_throughput_run
from portq.bench.report import DEFAULT_SCENARIOS, SCENARIOS, as_json, machine, parse_sizes, run
from portq.bench.table import (
                                BENCH_PREFIX,
                                CLAIM_LIMIT,
                                FILL_CHUNK,
                                PLANNED_ENGINES,
                                QUEUE_COUNT,
                                analyze_table,
                                claim_params,
                                db_clock,
                                drop_tables,
                                fill_jobs,
                                server_version,
                                settle,
)

__all__ = [
    "BENCH_PREFIX", "BULK_CHUNK", "CEILING_FRONTS", "CLAIM_LIMIT", "CORE_BOUND_PCT",
    "CPU_BOUND_PCT", "DEFAULT_BATCHES", "DEFAULT_JOBS", "DEFAULT_MODES",
    "DEFAULT_SCENARIOS", "DEFAULT_SIZES", "DEFAULT_WORKERS", "FILL_CHUNK", "GROWTH_READY",
    "GROWTH_ROWS", "KEYED_JOBS", "KEYS", "LIMITED_MAX_RUNNING", "METER_SAMPLE_S", "MODES",
    "PICKUP_AFTER_QUIET", "PICKUP_GAP_S", "PICKUP_JOBS", "PICKUP_QUIET_S",
    "PLANNED_ENGINES", "QUEUE_COUNT", "RAW_COMPLETES", "RUN_OPTIONS", "SAMPLE_S",
    "SCENARIOS", "ClaimPlan", "CpuMeter", "analyze_table", "as_json",
    "async_throughput_run", "bulk_enqueue", "claim_latency", "claim_params", "clear_queue",
    "complete_claim_sql", "cpu_bound", "db_clock", "drop_tables", "enqueue_rates",
    "explain_claim", "fill_jobs", "growth", "machine", "meter", "mode_options",
    "parse_sizes", "percentile", "pickup", "process_bound", "processes_run",
    "processes_sweep", "raw_completes", "raw_throughput_run", "run", "server_version",
    "settle", "sleep_ceiling", "throughput", "throughput_run", "time_claim"]
