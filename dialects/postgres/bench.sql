-- Statements of `portq bench` (portq/bench/) for PostgreSQL: filling the table fast, the
-- claim's plan, the server's clock, connections, counters and waits. Not used by queues.

-- One chunk of due jobs in :state ('ready' or 'succeeded'), :count rows in one statement.
-- name: bench_fill
INSERT INTO portq_job (queue, payload, state, priority, run_at, attempts, max_attempts,
                       created_at, finished_at)
SELECT :queue, jsonb_build_object('n', g), :state, g % 3,
       now() - (:offset + g) * interval '1 millisecond',
       CASE WHEN :state = 'ready' THEN 0 ELSE 1 END, 25, now(),
       CASE WHEN :state = 'ready' THEN NULL ELSE now() END
FROM generate_series(1, :count) AS g;

-- name: bench_analyze
ANALYZE portq_job;

-- Between throughput runs, outside a transaction: the last run's dead rows would slow the
-- next one wherever autovacuum is off or behind.
-- name: bench_settle
VACUUM portq_job;

-- The claim's plan (the claim statement follows), read as JSON; EXPLAIN runs it when ANALYZE.
-- name: bench_explain
EXPLAIN (FORMAT JSON)

-- name: bench_explain_analyze
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)

-- name: bench_version
SELECT version();

-- name: bench_clock
SELECT extract(epoch FROM clock_timestamp());

-- name: bench_finished_clock
SELECT extract(epoch FROM max(finished_at)) FROM portq_job WHERE queue = :queue;

-- name: bench_connections
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
   AND pid <> pg_backend_pid();

-- Cumulative counters of this database, as (name, value) rows.
-- name: bench_server_stats
SELECT 'commits', xact_commit FROM pg_stat_database WHERE datname = current_database()
UNION ALL
SELECT 'rollbacks', xact_rollback FROM pg_stat_database WHERE datname = current_database()
UNION ALL
SELECT 'deadlocks', deadlocks FROM pg_stat_database WHERE datname = current_database();

-- (wait_event_type or 'CPU', backends) of this database's active backends.
-- name: bench_waits
SELECT coalesce(wait_event_type, 'CPU'), count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
 GROUP BY 1;

-- `complete_many` of the previous batch and `claim` of the next in one statement (one round
-- trip instead of two; benchmarks/run.py measures it as `raw complete_claim`), composed by
-- portq/bench/raw.py from this dialect's own two statements so that it can never drift from
-- them: {complete_ctes} is complete_many without its final SELECT (bench_complete_many_tail),
-- {claim} the claim as one more CTE. Data-modifying CTEs run exactly once, on one snapshot:
-- the claim's candidates are ready rows, the completed ones running, so the two never touch
-- the same row. Rows: kind 'done' (job_id, attempts of each completed claim) and 'claimed'
-- (the claim's columns).
-- name: bench_complete_claim
{complete_ctes}, claimed AS (
{claim}
)
SELECT 'claimed' AS kind, job_id, queue, payload, priority, attempts, max_attempts,
       job_key, lease_until, concurrency_key, concurrency_limit, run_at, meta
FROM claimed
UNION ALL
SELECT 'done', job_id, NULL, NULL, NULL, attempts, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM done, announced

-- complete_many's final SELECT: joining the one row of its `announced` CTE is what runs
-- the NOTIFY of the dependents it made ready.
-- name: bench_complete_many_tail
SELECT job_id, attempts FROM done, announced
