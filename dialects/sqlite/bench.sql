-- Statements of `portq bench` (portq/bench/) for SQLite. Not used by queues.

-- One chunk of due jobs in :state ('ready' or 'succeeded'), :count rows in one statement.
-- name: bench_fill
INSERT INTO portq_job (queue, payload, state, priority, run_at, attempts, max_attempts,
                       created_at, finished_at)
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :count)
SELECT :queue, json_object('n', n), :state, n % 3,
       CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - (:offset + n) * 1000,
       CASE WHEN :state = 'ready' THEN 0 ELSE 1 END, 25,
       CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
       CASE WHEN :state = 'ready' THEN NULL
            ELSE CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) END
FROM g;

-- name: bench_analyze
ANALYZE portq_job;

-- The claim's plan (the claim statement follows): one row per step, detail in column 3.
-- name: bench_explain
EXPLAIN QUERY PLAN

-- name: bench_explain_analyze
EXPLAIN QUERY PLAN

-- name: bench_version
SELECT 'SQLite ' || sqlite_version();

-- name: bench_clock
SELECT (julianday('now') - 2440587.5) * 86400.0;

-- name: bench_finished_clock
SELECT max(finished_at) / 1e6 FROM portq_job WHERE queue = :queue;

-- After a run on an existing file, outside a transaction: the benchmark's pages given back.
-- name: bench_compact
VACUUM;
