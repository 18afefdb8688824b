-- Statements of `portq bench` (portq/bench/) for MySQL and MariaDB. Not used by queues.

-- One chunk of due jobs in :state ('ready' or 'succeeded'), :count rows (at most 100,000:
-- the numbers 1..100000 come from five cross-joined digit tables) in one statement.
-- name: bench_fill
INSERT INTO portq_job (queue, payload, state, priority, run_at, attempts, max_attempts,
                       created_at, finished_at)
SELECT :queue, JSON_OBJECT('n', g.n), :state, g.n % 3,
       UTC_TIMESTAMP(6) - INTERVAL (:offset + g.n) * 1000 MICROSECOND,
       CASE WHEN :state = 'ready' THEN 0 ELSE 1 END, 25, UTC_TIMESTAMP(6),
       CASE WHEN :state = 'ready' THEN NULL ELSE UTC_TIMESTAMP(6) END
FROM (SELECT d0.d + d1.d * 10 + d2.d * 100 + d3.d * 1000 + d4.d * 10000 + 1 AS n
        FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d0
        CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d1
        CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d2
        CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d3
        CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d4
     ) AS g
WHERE g.n <= :count;

-- ANALYZE TABLE answers with a result set.
-- name: bench_analyze
ANALYZE TABLE portq_job;

-- The claim's plan (its locking SELECT follows) as JSON; MariaDB's ANALYZE runs it and
-- reports r_total_time_ms. MySQL has no ANALYZE FORMAT=JSON: plain EXPLAIN there.
-- name: bench_explain
EXPLAIN FORMAT=JSON

-- name: bench_explain_analyze
ANALYZE FORMAT=JSON

-- name: bench_version
SELECT VERSION();

-- name: bench_clock
SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6;

-- name: bench_finished_clock
SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', max(finished_at)) / 1e6
  FROM portq_job WHERE queue = :queue;

-- name: bench_connections
SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()
   AND ID <> CONNECTION_ID();

-- The server's global counters, as (name, value) rows.
-- name: bench_server_stats
SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_commit', 'Innodb_row_lock_waits',
    'Innodb_row_lock_time', 'Innodb_deadlocks');
