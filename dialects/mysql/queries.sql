-- Named statements for MySQL 8.0.16+ / MariaDB 10.6+ (InnoDB).
--
-- "now" is UTC_TIMESTAMP(6), whatever the session time zone; durations arrive in
-- milliseconds: UTC_TIMESTAMP(6) + INTERVAL (:lease_ms * 1000) MICROSECOND.
--
-- Neither engine has UPDATE ... RETURNING, and neither lets an UPDATE or DELETE select
-- from its own table with LIMIT in a subquery. The operations that need that (claim,
-- reap, prune) are therefore several statements, run in order in one transaction by
-- portq/backends/mysql.py: the first locks ids with FOR UPDATE SKIP LOCKED, the next
-- ones use them as :ids. migration_lock is two statements too: acquire, release.
--
-- queue, state, worker_id and job_key are VARBINARY (schema.sql, migration 2: compared
-- byte by byte, trailing spaces significant); a statement that returns one converts it
-- with CONVERT(... USING utf8mb4), so the driver hands back str, not bytes.
--
-- Single-table UPDATE assignments are evaluated left to right, each seeing the values
-- assigned before it: no SET below reads a column that an earlier SET changed.

-- name: create_version_table
CREATE TABLE IF NOT EXISTS portq_schema_version (
    version    INT         NOT NULL PRIMARY KEY,
    applied_at DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: migration_lock
SELECT GET_LOCK(CONCAT(COALESCE(DATABASE(), ''), '.portq_migrate'), :timeout_s);
SELECT RELEASE_LOCK(CONCAT(COALESCE(DATABASE(), ''), '.portq_migrate'));

-- name: schema_version
SELECT MAX(version) FROM portq_schema_version;

-- Every applied migration: migrate() applies each version not listed, so that a
-- migration numbered below the newest applied one (merged later) still runs.
-- name: applied_versions
SELECT version FROM portq_schema_version;

-- name: record_version
INSERT INTO portq_schema_version (version, applied_at) VALUES (:version, UTC_TIMESTAMP(6));

-- name: insert_job
-- A plain INSERT: whether it made the row is decided by the statement itself. A taken key
-- raises 1062 (ER_DUP_ENTRY), which rolls back this statement only (InnoDB keeps the
-- transaction); MysqlBackend.insert_job catches it and reads the existing id with
-- job_id_by_key_locked. If the key's row is uncommitted, the insert waits for it, then
-- inserts (it rolled back) or raises 1062 (it committed). (ON DUPLICATE KEY UPDATE could
-- not say which happened: with CLIENT.FOUND_ROWS, which SQLAlchemy, Django and portq set,
-- an inserted and an unchanged row both count 1.)
INSERT INTO portq_job (queue, payload, priority, run_at, max_attempts, job_key, created_at,
                       concurrency_key, concurrency_limit, timeout_ms, meta)
VALUES (:queue, :payload, :priority,
        COALESCE(CAST(:run_at AS DATETIME(6)),
                 UTC_TIMESTAMP(6) + INTERVAL (:delay_ms * 1000) MICROSECOND),
        :max_attempts, :key, UTC_TIMESTAMP(6),
        :concurrency_key, :concurrency_limit, :timeout_ms, :meta);

-- name: insert_jobs_bulk
-- Many jobs without a key in one multi-row INSERT (MysqlBackend.insert_jobs): the VALUES
-- row is repeated once per job, its parameters numbered (:queue_0, :queue_1, ...).
-- MariaDB appends RETURNING job_id; MySQL reads the first id (LAST_INSERT_ID) and the
-- auto-increment step, which are consecutive per statement in lock modes 0 and 1.
INSERT INTO portq_job (queue, payload, priority, run_at, max_attempts, job_key, created_at,
                       concurrency_key, concurrency_limit, timeout_ms, meta)
VALUES (:queue, :payload, :priority,
        COALESCE(CAST(:run_at AS DATETIME(6)),
                 UTC_TIMESTAMP(6) + INTERVAL (:delay_ms * 1000) MICROSECOND),
        :max_attempts, NULL, UTC_TIMESTAMP(6),
        :concurrency_key, :concurrency_limit, :timeout_ms, :meta);

-- name: autoinc_settings
SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment;

-- name: job_id_by_key
SELECT job_id FROM portq_job WHERE job_key = :key;

-- name: job_id_by_key_locked
-- The job holding a key another transaction just committed (the insert met it: 1062).
-- A locking read sees the latest committed row, also in a caller's REPEATABLE READ
-- transaction whose snapshot is older than that commit (a plain SELECT would not).
SELECT job_id FROM portq_job WHERE job_key = :key LOCK IN SHARE MODE;

-- name: claim
SELECT job_id FROM portq_job
WHERE queue = :queue AND state = 'ready' AND run_at <= UTC_TIMESTAMP(6)
  AND attempts < max_attempts
  -- a paused queue claims nothing: a primary-key probe; FOR UPDATE does not lock the
  -- rows of a subquery that has no locking clause of its own
  AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
  -- per-key limits: skip a keyed job whose key has its limit of running jobs (a
  -- non-locking count on portq_job_ckey_idx; unkeyed rows stop at IS NULL), so a full key
  -- never blocks the jobs behind it. Racy between claimers: SqlBackend.settle_keys recounts.
  AND (concurrency_key IS NULL
       OR (SELECT COUNT(*) FROM portq_job AS r
           WHERE r.queue = :queue AND r.concurrency_key = portq_job.concurrency_key
             AND r.state = 'running') < concurrency_limit)
ORDER BY priority DESC, run_at, job_id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

UPDATE portq_job
SET state = 'running',
    attempts = attempts + 1,
    worker_id = :worker_id,
    lease_until = UTC_TIMESTAMP(6) + INTERVAL (:lease_ms * 1000) MICROSECOND,
    -- when this attempt (and the first) started: migration 10
    started_at = UTC_TIMESTAMP(6),
    first_started_at = COALESCE(first_started_at, UTC_TIMESTAMP(6))
WHERE job_id IN (:ids);

SELECT job_id, CONVERT(queue USING utf8mb4), payload, priority, attempts, max_attempts,
       CONVERT(job_key USING utf8mb4), lease_until, CONVERT(concurrency_key USING utf8mb4),
       concurrency_limit, timeout_ms, run_at, meta
FROM portq_job
WHERE job_id IN (:ids)
ORDER BY priority DESC, run_at, job_id;

-- name: renew
UPDATE portq_job
SET lease_until = UTC_TIMESTAMP(6) + INTERVAL (:lease_ms * 1000) MICROSECOND
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > UTC_TIMESTAMP(6);

-- name: complete
UPDATE portq_job
SET state = 'succeeded', worker_id = NULL, lease_until = NULL, finished_at = UTC_TIMESTAMP(6)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > UTC_TIMESTAMP(6);

-- name: complete_many
-- Several completions (MysqlBackend.fenced_rows), two statements whatever their number,
-- since neither engine has UPDATE ... RETURNING: lock the rows each claim still owns
-- (:claims is a JSON array of {"job_id", "generation", "worker_id"}, fenced as
-- `complete`; worker ids compared as bytes), then update exactly those. The row locks
-- keep every locked claim's ownership until COMMIT, so the ids locked are the claims
-- completed. STRAIGHT_JOIN and the PRIMARY index make it read the claims first and reach
-- each job by its key: a walk of another index (MariaDB chose the lease index for a few
-- running rows) would lock other workers' rows too. has_dependents: those jobs'
-- dependents are released in this transaction (SqlBackend.completed_dependencies).
SELECT j.job_id, j.attempts, j.has_dependents
FROM JSON_TABLE(:claims, '$[*]' COLUMNS (
         job_id BIGINT PATH '$.job_id', generation INT PATH '$.generation',
         worker_id VARCHAR(255) PATH '$.worker_id')) AS c
STRAIGHT_JOIN portq_job AS j FORCE INDEX (PRIMARY) ON j.job_id = c.job_id
WHERE j.attempts = c.generation
  AND CAST(j.worker_id AS BINARY) = CAST(c.worker_id AS BINARY)
  AND j.state = 'running' AND j.lease_until > UTC_TIMESTAMP(6)
FOR UPDATE;

UPDATE portq_job
SET state = 'succeeded', worker_id = NULL, lease_until = NULL, finished_at = UTC_TIMESTAMP(6)
WHERE job_id IN (:ids);

-- name: renew_many
-- Several renewals (the heartbeat's tick), locked and then updated as complete_many.
SELECT j.job_id, j.attempts
FROM JSON_TABLE(:claims, '$[*]' COLUMNS (
         job_id BIGINT PATH '$.job_id', generation INT PATH '$.generation',
         worker_id VARCHAR(255) PATH '$.worker_id')) AS c
STRAIGHT_JOIN portq_job AS j FORCE INDEX (PRIMARY) ON j.job_id = c.job_id
WHERE j.attempts = c.generation
  AND CAST(j.worker_id AS BINARY) = CAST(c.worker_id AS BINARY)
  AND j.state = 'running' AND j.lease_until > UTC_TIMESTAMP(6)
FOR UPDATE;

UPDATE portq_job
SET lease_until = UTC_TIMESTAMP(6) + INTERVAL (:lease_ms * 1000) MICROSECOND
WHERE job_id IN (:ids);

-- name: fail
UPDATE portq_job
SET state = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN run_at
                  ELSE UTC_TIMESTAMP(6) + INTERVAL (:retry_ms * 1000) MICROSECOND END,
    finished_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts
                       THEN UTC_TIMESTAMP(6) END,
    worker_id = NULL, lease_until = NULL, last_error = :error
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > UTC_TIMESTAMP(6);

-- name: record_error
INSERT INTO portq_job_error (job_id, attempt, worker_id, error, failed_at)
VALUES (:job_id, :generation, :worker_id, :error, UTC_TIMESTAMP(6));

-- name: job_errors
SELECT attempt, CONVERT(worker_id USING utf8mb4), error, failed_at FROM portq_job_error
WHERE job_id = :job_id ORDER BY attempt;

-- name: release
-- Give a claimed job back unstarted (shutdown, a stale look-ahead, a late claim). Its
-- attempt is given back (max_attempts + 1, given_back + 1) while given_back is under the
-- job's own budget (max_attempts - given_back, i.e. 2 * given_back < max_attempts), so a
-- job is never claimed without end without a handler running it; past that the give-back
-- spends the attempt, and a job whose attempts are then spent goes dead, saying why.
-- MySQL (and MariaDB unless sql_mode has SIMULTANEOUS_ASSIGNMENT) assigns left to right,
-- each later expression seeing the earlier ones' new values. So state, finished_at and
-- last_error come first (they read the old values), then max_attempts, then given_back,
-- whose test gives the same answer either way: max_attempts grew only when the test held.
UPDATE portq_job
SET state = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN 'ready' ELSE 'dead' END,
    finished_at = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN NULL ELSE UTC_TIMESTAMP(6) END,
    last_error = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN last_error
                      ELSE CONCAT('given back unstarted ', given_back, ' times with its attempt, ',
                                  'then with its last one') END,
    max_attempts = max_attempts + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    given_back = given_back + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    worker_id = NULL, lease_until = NULL, run_at = UTC_TIMESTAMP(6)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > UTC_TIMESTAMP(6);

-- name: reap
SELECT job_id FROM portq_job
WHERE state = 'running' AND lease_until <= UTC_TIMESTAMP(6)
ORDER BY lease_until
LIMIT :limit
FOR UPDATE SKIP LOCKED;

UPDATE portq_job
SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at
                  ELSE UTC_TIMESTAMP(6) + INTERVAL (:delay_ms * 1000) MICROSECOND END,
    finished_at = CASE WHEN attempts >= max_attempts THEN UTC_TIMESTAMP(6) END,
    last_error = CONCAT('lease expired (worker ', CONVERT(worker_id USING utf8mb4),
                        ', attempt ', attempts, ')'),
    worker_id = NULL, lease_until = NULL
WHERE job_id IN (:ids) AND state = 'running';

-- name: prune
SELECT job_id FROM portq_job
WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
  AND finished_at < UTC_TIMESTAMP(6) - INTERVAL (:older_than_ms * 1000) MICROSECOND
  -- never a result an unfinished dependent may still read (migration 12)
  AND NOT EXISTS (SELECT 1 FROM portq_job_dep AS d JOIN portq_job AS w ON w.job_id = d.job_id
                  WHERE d.depends_on = portq_job.job_id
                    AND w.state IN ('waiting', 'ready', 'running'))
ORDER BY finished_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;

DELETE FROM portq_job WHERE job_id IN (:ids);

-- name: retry_dead
-- The attempts it had left plus :extra (a job cancelled before it ran keeps its whole
-- budget), saturating at the largest INT instead of overflowing.
UPDATE portq_job
SET state = 'ready', finished_at = NULL,
    max_attempts = max_attempts + CASE WHEN :extra < 2147483647 - max_attempts
                                      THEN :extra ELSE 2147483647 - max_attempts END,
    run_at = UTC_TIMESTAMP(6)
WHERE job_id = :job_id AND state IN ('dead', 'cancelled');

-- name: cancel
UPDATE portq_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL, finished_at = UTC_TIMESTAMP(6),
    deps_left = 0
WHERE job_id = :job_id AND state IN ('ready', 'running', 'waiting');

-- name: stats
SELECT CONVERT(queue USING utf8mb4),
       SUM(state = 'ready' AND run_at <= n.now),
       SUM(state = 'ready' AND run_at > n.now),
       SUM(state = 'running'),
       SUM(state = 'succeeded'),
       SUM(state = 'dead'),
       SUM(state = 'cancelled'),
       MIN(CASE WHEN state = 'ready' AND run_at <= n.now THEN run_at END),
       MAX(n.now),
       SUM(state = 'waiting')
FROM portq_job
CROSS JOIN (SELECT UTC_TIMESTAMP(6) AS now) AS n
WHERE :queue = '*' OR queue = :queue
GROUP BY queue;

-- name: pending
-- Whether the queue has a job ready and due, and whether it has one running (a burst
-- worker's exit test). Each EXISTS stops at the first entry of portq_job_ready_idx's
-- (queue, state) prefix, so its cost does not grow with the table; `stats` counts every row
-- of the queue instead. A ready row another session holds locked counts as the claim sees
-- it: not there (FOR UPDATE SKIP LOCKED, as the claim; the lock is this short
-- transaction's), so a burst worker exits instead of waiting for that session.
SELECT EXISTS (SELECT 1 FROM portq_job
               WHERE queue = :queue AND state = 'ready' AND run_at <= UTC_TIMESTAMP(6)
               FOR UPDATE SKIP LOCKED),
       EXISTS (SELECT 1 FROM portq_job WHERE queue = :queue AND state = 'running');

-- Listing jobs (portq jobs, the dashboard), paged by key: after_id/after_run_at are the
-- last row of the previous page (after_id = 0 on the first page). Filters: state, queue,
-- payload text (lower-cased LIKE pattern, '!' escapes). Three orders. (A key filter is a
-- job_id_by_key lookup instead: at most one job, by the unique index.)
-- name: jobs
SELECT job_id, CONVERT(queue USING utf8mb4), CONVERT(state USING utf8mb4), payload, priority,
       attempts, max_attempts, CONVERT(job_key USING utf8mb4), run_at,
       CONVERT(worker_id USING utf8mb4), lease_until, last_error,
       created_at, finished_at,
       progress, CONVERT(progress_note USING utf8mb4), progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(CAST(payload AS CHAR)) LIKE :pattern ESCAPE '!')
  AND job_id > :after_id
ORDER BY job_id
LIMIT :limit;

-- name: jobs_newest
SELECT job_id, CONVERT(queue USING utf8mb4), CONVERT(state USING utf8mb4), payload, priority,
       attempts, max_attempts, CONVERT(job_key USING utf8mb4), run_at,
       CONVERT(worker_id USING utf8mb4), lease_until, last_error,
       created_at, finished_at,
       progress, CONVERT(progress_note USING utf8mb4), progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(CAST(payload AS CHAR)) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR job_id < :after_id)
ORDER BY job_id DESC
LIMIT :limit;

-- name: jobs_by_run_at
SELECT job_id, CONVERT(queue USING utf8mb4), CONVERT(state USING utf8mb4), payload, priority,
       attempts, max_attempts, CONVERT(job_key USING utf8mb4), run_at,
       CONVERT(worker_id USING utf8mb4), lease_until, last_error,
       created_at, finished_at,
       progress, CONVERT(progress_note USING utf8mb4), progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(CAST(payload AS CHAR)) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR run_at > :after_run_at
       OR (run_at = :after_run_at AND job_id > :after_id))
ORDER BY run_at, job_id
LIMIT :limit;

-- name: job
SELECT job_id, CONVERT(queue USING utf8mb4), CONVERT(state USING utf8mb4), payload, priority,
       attempts, max_attempts, CONVERT(job_key USING utf8mb4), run_at,
       CONVERT(worker_id USING utf8mb4), lease_until, last_error,
       created_at, finished_at,
       progress, CONVERT(progress_note USING utf8mb4), progress_at,
       given_back + snoozes AS released, meta,
       started_at, first_started_at
FROM portq_job
WHERE job_id = :job_id;

-- Bulk operator actions (portq retry/cancel --queue Q --state S): lock one bounded batch,
-- then update it.
-- name: retry_many
SELECT job_id FROM portq_job
WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
ORDER BY job_id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

UPDATE portq_job
SET state = 'ready', max_attempts = attempts + :extra, finished_at = NULL,
    run_at = UTC_TIMESTAMP(6)
WHERE job_id IN (:ids) AND state IN (:states);

-- name: cancel_many
SELECT job_id FROM portq_job
WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
ORDER BY job_id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

UPDATE portq_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL, finished_at = UTC_TIMESTAMP(6),
    deps_left = 0
WHERE job_id IN (:ids) AND state IN (:states);

-- What `portq conformance` prints first: server version, session isolation level
-- (@@transaction_isolation on MySQL 8 and MariaDB 11.1+, else @@tx_isolation).
-- name: server_info
SELECT VERSION(), @@transaction_isolation;

-- name: server_info_tx
SELECT VERSION(), @@tx_isolation;

-- Which server a bulk enqueue writes to (MariaDB returns ids with INSERT ... RETURNING),
-- asked where the connection does not say (SQLAlchemy's async adapters).
-- name: server_version
SELECT VERSION();

-- Does a table of this prefix exist (before `portq conformance` drops it)?
-- name: table_exists
SELECT 1 FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = :name;

-- `portq stats` over the last :window_ms: failed attempts recorded (portq_job_error) and
-- jobs that succeeded, per queue (retry_rate = failed / (failed + succeeded)).
-- name: attempt_stats
SELECT CONVERT(queue USING utf8mb4), SUM(failed), SUM(succeeded)
FROM (
    SELECT j.queue AS queue, 1 AS failed, 0 AS succeeded
    FROM portq_job_error AS e JOIN portq_job AS j ON j.job_id = e.job_id
    WHERE e.failed_at > UTC_TIMESTAMP(6) - INTERVAL (:window_ms * 1000) MICROSECOND
      AND (:queue = '*' OR j.queue = :queue)
    UNION ALL
    SELECT queue, 0, 1
    FROM portq_job
    WHERE state = 'succeeded' AND finished_at > UTC_TIMESTAMP(6) - INTERVAL (:window_ms * 1000) MICROSECOND
      AND (:queue = '*' OR queue = :queue)
) AS a
GROUP BY queue;

-- Jobs finished per minute over the last :minutes minutes (the dashboard's charts); walks
-- the finished index.
-- name: finished_per_minute
-- queue and state are VARBINARY (migration 2): CONVERT hands the driver str
SELECT CONVERT(queue USING utf8mb4), CONVERT(state USING utf8mb4), TIMESTAMPDIFF(MINUTE, finished_at, UTC_TIMESTAMP(6)) AS minutes_ago,
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at > UTC_TIMESTAMP(6) - INTERVAL :minutes MINUTE
GROUP BY queue, state, minutes_ago;

-- name: delete_finished
DELETE FROM portq_job
WHERE job_id = :job_id AND state IN ('succeeded', 'dead', 'cancelled');

-- The worker registry (migration 3). A heartbeat first deletes the rows of workers whose
-- heartbeats stopped, then renews its own row (inserting it when it is missing).
-- name: expire_workers
DELETE FROM portq_worker WHERE expires_at <= UTC_TIMESTAMP(6);

-- name: register_worker
INSERT INTO portq_worker (worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules,
                          started_at, heartbeat_at, expires_at)
VALUES (:worker_id, :host, :pid, :queues, :concurrency, :jobs_in_hand, :schedules, UTC_TIMESTAMP(6),
        UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL (:ttl_ms * 1000) MICROSECOND);

-- name: worker_heartbeat
UPDATE portq_worker
SET jobs_in_hand = :jobs_in_hand, schedules = :schedules, heartbeat_at = UTC_TIMESTAMP(6),
    expires_at = UTC_TIMESTAMP(6) + INTERVAL (:ttl_ms * 1000) MICROSECOND
WHERE worker_id = :worker_id;

-- name: deregister_worker
DELETE FROM portq_worker WHERE worker_id = :worker_id;

-- name: workers
SELECT worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules, started_at,
       heartbeat_at, UTC_TIMESTAMP(6)
FROM portq_worker
WHERE expires_at > UTC_TIMESTAMP(6)
ORDER BY started_at, worker_id;

-- Results (migration 5). store_result runs lock_owned_job (which locks the job row, so no
-- reap or claim can take the job meanwhile), then delete_result and insert_result, in one
-- transaction: the result is written only while the claim still owns the job.
-- name: lock_owned_job
SELECT job_id FROM portq_job
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > UTC_TIMESTAMP(6)
FOR UPDATE;

-- name: delete_result
DELETE FROM portq_result WHERE job_id = :job_id;

-- name: insert_result
INSERT INTO portq_result (job_id, generation, result, stored_at)
VALUES (:job_id, :generation, :result, UTC_TIMESTAMP(6));

-- name: job_result
SELECT r.result FROM portq_result r JOIN portq_job j ON j.job_id = r.job_id
WHERE r.job_id = :job_id AND j.state = 'succeeded';

-- name: unique_ensure
-- Scoped uniqueness: make the scoped key's row exist, so that the next statement can lock
-- it (a concurrent enqueue of the same key waits there). Not INSERT IGNORE, which would
-- hide other errors too. See schema.sql, migration 6.
INSERT INTO portq_job_unique (unique_hash, job_id) VALUES (:hash, NULL)
ON DUPLICATE KEY UPDATE unique_hash = unique_hash;

-- name: unique_lock
-- Lock the scoped key's row: its latest job id (NULL when none or pruned).
SELECT job_id FROM portq_job_unique WHERE unique_hash = :hash FOR UPDATE;

-- name: unique_job
-- That job's state, and whether it was created less than :period_ms ago (1 when
-- :period_ms is NULL). A locking read (shared) sees the latest committed row whatever the
-- isolation level, where a plain read in REPEATABLE READ would use an older snapshot.
-- state is VARBINARY (migration 2): CONVERT hands the driver str, as holds_key compares.
SELECT CONVERT(state USING utf8mb4),
       CASE WHEN :period_ms IS NULL
                 OR created_at > UTC_TIMESTAMP(6) - INTERVAL (:period_ms * 1000) MICROSECOND
            THEN 1 ELSE 0 END
FROM portq_job WHERE job_id = :job_id
LOCK IN SHARE MODE;

-- name: unique_point
UPDATE portq_job_unique SET job_id = :job_id WHERE unique_hash = :hash;

-- name: set_paused
-- Pause (:paused = 1) or resume (0) a queue; the row is made on first use.
INSERT INTO portq_queue (queue, paused, updated_at)
VALUES (:queue, :paused, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE paused = :paused, updated_at = UTC_TIMESTAMP(6);

-- name: paused_queues
SELECT queue FROM portq_queue WHERE paused = 1 ORDER BY queue;

-- name: queue_limits
-- Every queue with a portq_queue row (portq stats): paused, running limit, rate limit,
-- fair (migration 13).
SELECT queue, paused, concurrency_limit, rate_limit, rate_period_ms, fair
FROM portq_queue WHERE :queue = '*' OR queue = :queue;

-- name: queue_control
-- The queue's limits, locked for the claim's transaction: claimers of a limited queue take
-- turns counting its running jobs and reading its rate log. No row: no limit.
SELECT concurrency_limit, rate_limit, rate_period_ms, rate_log, fair,
       CONVERT(fair_after USING utf8mb4)
FROM portq_queue WHERE queue = :queue FOR UPDATE;

-- name: running_count
-- A locking read would wait on claimers' locks; a plain one at READ COMMITTED sees what
-- the previous holder of the queue_control lock committed.
SELECT COUNT(*) FROM portq_job WHERE queue = :queue AND state = 'running';

-- name: set_concurrency_limit
-- At most :max_running running jobs of the queue (NULL: no limit); the row is made on
-- first use.
INSERT INTO portq_queue (queue, concurrency_limit, updated_at)
VALUES (:queue, :max_running, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE concurrency_limit = :max_running, updated_at = UTC_TIMESTAMP(6);

-- name: set_rate_limit
-- At most :rate_limit jobs of the queue started per :period_ms (NULLs: no rate limit, and
-- the log is cleared); the row is made on first use. A changed limit keeps the log.
INSERT INTO portq_queue (queue, rate_limit, rate_period_ms, updated_at)
VALUES (:queue, :rate_limit, :period_ms, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    rate_log = CASE WHEN :rate_limit IS NULL THEN NULL ELSE rate_log END,
    rate_limit = :rate_limit, rate_period_ms = :period_ms, updated_at = UTC_TIMESTAMP(6);

-- name: db_clock_ms
-- The DB clock in epoch milliseconds, read by a statement after queue_control took the row
-- lock (UTC_TIMESTAMP(6) is the statement's start).
SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000;

-- name: set_rate_log
UPDATE portq_queue SET rate_log = :rate_log WHERE queue = :queue;

-- name: ensure_queue
-- The queue's row, made if missing, so that a claim that took keyed jobs can lock it (not
-- INSERT IGNORE, which would hide a CHECK violation too).
INSERT INTO portq_queue (queue, updated_at) VALUES (:queue, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE queue = queue;

-- name: key_running_count
-- A key's running jobs, read after the queue row's lock: a non-locking read at READ
-- COMMITTED (a fresh snapshot with every claim committed before the lock, plus this
-- transaction's own rows; a locking read would wait on other claimers' rows).
SELECT COUNT(*) FROM portq_job
WHERE queue = :queue AND concurrency_key = :concurrency_key AND state = 'running';

-- name: unclaim
-- Put back a job this claim took beyond its key's limit: ready again, attempt undone.
UPDATE portq_job
SET state = 'ready', attempts = attempts - 1, worker_id = NULL, lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running';

-- name: next_lease_expiry_ms
-- Milliseconds until the earliest running lease expires (negative: already expired; NULL:
-- nothing runs). lease_until is set exactly while running (CHECK), so MIN() over
-- portq_job_lease_idx needs no state filter: one index read. A consistent read, no lock.
SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(lease_until)) DIV 1000
FROM portq_job;

-- name: snooze
-- A handler raised portq.Snooze: back to ready after :delay_ms without spending the attempt
-- (max_attempts + 1), at most :max_snoozes times per job (then nothing changes and the
-- worker records the attempt as failed instead); fenced like every owner's write.
UPDATE portq_job
SET state = 'ready', run_at = UTC_TIMESTAMP(6) + INTERVAL (:delay_ms * 1000) MICROSECOND,
    max_attempts = max_attempts + 1, snoozes = snoozes + 1, worker_id = NULL,
    lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > UTC_TIMESTAMP(6) AND snoozes < :max_snoozes;

-- Progress (migration 11): the running job's last report, fenced like every write of its
-- owner (job, generation, worker, running, lease not expired); rowcount 1 = written
-- (rows matched: portq sets CLIENT.FOUND_ROWS, and progress_at changes anyway).
-- name: set_progress
UPDATE portq_job
SET progress = :progress, progress_note = :note, progress_at = UTC_TIMESTAMP(6)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > UTC_TIMESTAMP(6);

-- name: worker_activity
-- The dashboard's Workers page: each live worker's row expiry and the running jobs the job
-- table says it holds (only running rows have a lease: a range of portq_job_lease_idx).
SELECT CONVERT(w.worker_id USING utf8mb4), w.expires_at, UTC_TIMESTAMP(6),
       (SELECT COUNT(*) FROM portq_job j
        WHERE j.lease_until IS NOT NULL AND j.state = 'running' AND j.worker_id = w.worker_id)
FROM portq_worker w
WHERE w.expires_at > UTC_TIMESTAMP(6);

-- name: job_concurrency
-- A job's per-key limit (enqueue(concurrency_key=, concurrency_limit=)), for its page
-- (the key is VARBINARY: read back as text).
SELECT CONVERT(concurrency_key USING utf8mb4), concurrency_limit
FROM portq_job WHERE job_id = :job_id;

-- name: queue_key_limits
-- The queue page's per-key limits in use: the keys of the queue's running jobs, each with
-- its limit and running count, busiest first (portq_job_ckey_idx (queue, state,
-- concurrency_key, ...), migration 13).
SELECT CONVERT(concurrency_key USING utf8mb4), MAX(concurrency_limit), COUNT(*)
FROM portq_job
WHERE queue = :queue AND state = 'running' AND concurrency_key IS NOT NULL
GROUP BY concurrency_key
ORDER BY COUNT(*) DESC, concurrency_key
LIMIT :limit;

-- ---- throughput and latency statistics (Queue.job_stats; portq stats; the dashboard) ----
-- Both read only the jobs that finished within the window, walking portq_job_finished_idx
-- over that range: the cost follows the rows in the window, never the table (EXPLAIN in
-- docs/engines.md, "Job statistics").

-- name: stats_series
-- Jobs finished per bucket of :bucket_s seconds over the last :window_s seconds, per queue
-- and state (bucket 0 the current one).
SELECT CONVERT(queue USING utf8mb4), CONVERT(state USING utf8mb4),
       FLOOR(TIMESTAMPDIFF(MICROSECOND, finished_at, UTC_TIMESTAMP(6)) / 1000000 / :bucket_s)
           AS ago,
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at > UTC_TIMESTAMP(6) - INTERVAL :window_s SECOND
GROUP BY queue, state, ago;

-- name: stats_latency
-- Wait (created -> first start) and run (latest start -> finish) time of the succeeded and
-- dead jobs of the window, as counts per queue and pair of log buckets: bucket b holds
-- durations from 2^(b/4) ms (durations under 1 ms fall in bucket 0); NULL when the job has
-- no start time.
SELECT CONVERT(queue USING utf8mb4),
       FLOOR(4 * LOG2(GREATEST(TIMESTAMPDIFF(MICROSECOND, created_at, first_started_at)
                               / 1000, 1))) AS wait_b,
       FLOOR(4 * LOG2(GREATEST(TIMESTAMPDIFF(MICROSECOND, started_at, finished_at)
                               / 1000, 1))) AS run_b,
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead')
  AND finished_at > UTC_TIMESTAMP(6) - INTERVAL :window_s SECOND
GROUP BY queue, wait_b, run_b;

-- ---- job dependencies (migration 12; portq/backends/dependencies.py) -------------------
-- Locking reads (FOR UPDATE) read the latest committed row whatever the caller's isolation
-- level. UPDATE ... SET assigns left to right here, so `state` (reading the old deps_left)
-- comes before `deps_left`.
-- name: dep_lock
SELECT job_id, state FROM portq_job
WHERE job_id IN (:dep_ids)
ORDER BY job_id
FOR UPDATE;

-- name: dep_flag
UPDATE portq_job SET has_dependents = 1
WHERE job_id IN (:dep_ids) AND has_dependents = 0 AND state IN ('ready', 'running', 'waiting');

-- name: dep_insert
INSERT INTO portq_job_dep (job_id, depends_on, resolved)
SELECT :job_id, job_id, CASE WHEN :count_unfinished = 1 AND state IN ('ready', 'running', 'waiting') THEN 0 ELSE 1 END
FROM portq_job WHERE job_id IN (:dep_ids);

-- name: dep_wait
UPDATE portq_job SET state = 'waiting', deps_left = :deps_left, dep_failure = :dep_failure
WHERE job_id = :job_id AND state = 'ready';

-- name: dep_release
-- Two steps (MysqlBackend.dependents_update): the dependents through the edge index, locked,
-- then their update (a one-statement UPDATE ... IN (subquery) scans the job table here).
SELECT w.job_id
FROM portq_job_dep AS d STRAIGHT_JOIN portq_job AS w FORCE INDEX (PRIMARY) ON w.job_id = d.job_id
WHERE d.depends_on = :job_id AND d.resolved = 0 AND w.state = 'waiting'
  AND (:every = 1 OR w.dep_failure = 1)
ORDER BY w.job_id
FOR UPDATE;

UPDATE portq_job
SET state = CASE WHEN deps_left = 1 THEN 'ready' ELSE state END, deps_left = deps_left - 1
WHERE job_id IN (:ids) AND state = 'waiting';

-- name: dep_cancel_ids
SELECT w.job_id, w.has_dependents
FROM portq_job_dep AS d STRAIGHT_JOIN portq_job AS w FORCE INDEX (PRIMARY) ON w.job_id = d.job_id
WHERE d.depends_on = :job_id AND d.resolved = 0 AND w.state = 'waiting' AND w.dep_failure = 0
FOR UPDATE;

-- name: dep_cancel
SELECT w.job_id
FROM portq_job_dep AS d STRAIGHT_JOIN portq_job AS w FORCE INDEX (PRIMARY) ON w.job_id = d.job_id
WHERE d.depends_on = :job_id AND d.resolved = 0 AND w.state = 'waiting' AND w.dep_failure = 0
ORDER BY w.job_id
FOR UPDATE;

UPDATE portq_job
SET state = 'cancelled', deps_left = 0, finished_at = UTC_TIMESTAMP(6), last_error = :error
WHERE job_id IN (:ids) AND state = 'waiting' AND dep_failure = 0;

-- name: dep_cancel_job
UPDATE portq_job SET state = 'cancelled', finished_at = UTC_TIMESTAMP(6), last_error = :error
WHERE job_id = :job_id AND state = 'ready';

-- name: dep_resolve
UPDATE portq_job_dep SET resolved = 1 WHERE depends_on = :job_id AND resolved = 0;

-- name: dep_unflag
UPDATE portq_job SET has_dependents = 0 WHERE job_id = :job_id;

-- name: dep_unsettled
SELECT job_id, state FROM portq_job
WHERE has_dependents = 1 AND state IN ('dead', 'cancelled')
ORDER BY job_id
FOR UPDATE;

-- Retrying a dependency (retry_dead, retry_many; dependencies.revive) revives the
-- dependents its failure cancelled: those cancelled with the reason naming it
-- (dependencies.failure_reason's text), locked; then each is checked and reopened.
-- name: dep_revive_ids
SELECT j.job_id FROM portq_job_dep AS d
JOIN portq_job AS j ON j.job_id = d.job_id
WHERE d.depends_on IN (:dep_ids) AND j.state = 'cancelled'
  AND j.last_error IN (CONCAT('cancelled: its dependency, job ', d.depends_on, ', ended dead'),
                       CONCAT('cancelled: its dependency, job ', d.depends_on, ', ended cancelled'))
ORDER BY j.job_id
FOR UPDATE;

-- A revived dependent's edges to its unfinished dependencies count again.
-- name: dep_reopen
UPDATE portq_job_dep SET resolved = 0 WHERE job_id = :job_id AND depends_on IN (:dep_ids);

-- name: dep_revive
UPDATE portq_job
SET state = 'waiting', deps_left = :deps_left, finished_at = NULL, last_error = NULL
WHERE job_id = :job_id AND state = 'cancelled';

-- name: dependency_results
SELECT d.depends_on, r.result
FROM portq_job_dep AS d JOIN portq_result AS r ON r.job_id = d.depends_on
WHERE d.job_id = :job_id
ORDER BY d.depends_on;

-- name: job_dependencies
SELECT d.depends_on, j.state FROM portq_job_dep AS d
LEFT JOIN portq_job AS j ON j.job_id = d.depends_on
WHERE d.job_id = :job_id
ORDER BY d.depends_on;

-- name: job_dependents
SELECT d.job_id, j.state FROM portq_job_dep AS d
JOIN portq_job AS j ON j.job_id = d.job_id
WHERE d.depends_on = :job_id
ORDER BY d.job_id;

-- ---- fair sharing across keys (migration 13; SqlBackend.fair_rows) ---------------------

-- name: set_fairness
-- A queue's claims take jobs round-robin across concurrency keys (:fair = 1) or in plain
-- claim order (0); the row is made on first use, the round starts over.
INSERT INTO portq_queue (queue, fair, updated_at)
VALUES (:queue, :fair, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE fair = :fair, fair_after = NULL, updated_at = UTC_TIMESTAMP(6);

-- name: set_fair_after
-- The key a fair claim served last (NULL: the unkeyed jobs' turn), under the row's lock.
UPDATE portq_queue SET fair_after = :after WHERE queue = :queue;

-- name: fair_first_key
-- The smallest key with a ready job (portq_job_ckey_idx (queue, state, concurrency_key,
-- ...): one seek; NULLs sort first, the IS NOT NULL bound skips them). A plain read.
SELECT CONVERT(concurrency_key USING utf8mb4) FROM portq_job
WHERE queue = :queue AND state = 'ready' AND concurrency_key IS NOT NULL
ORDER BY concurrency_key
LIMIT 1;

-- name: fair_next_key
-- The next key after :after with a ready job (one seek on portq_job_ckey_idx; keys
-- compare as bytes).
SELECT CONVERT(concurrency_key USING utf8mb4) FROM portq_job
WHERE queue = :queue AND state = 'ready' AND concurrency_key > :after
ORDER BY concurrency_key
LIMIT 1;

-- name: claim_key
-- The claim of one key's jobs: `claim` with the key fixed, walking portq_job_ckey_idx
-- (queue, 'ready', key) in (priority DESC, run_at, job_id) order; then as `claim`.
SELECT job_id FROM portq_job
WHERE queue = :queue AND state = 'ready' AND concurrency_key = :concurrency_key
  AND run_at <= UTC_TIMESTAMP(6) AND attempts < max_attempts
  AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
  AND (SELECT COUNT(*) FROM portq_job AS r
       WHERE r.queue = :queue AND r.concurrency_key = :concurrency_key
         AND r.state = 'running') < concurrency_limit
ORDER BY concurrency_key, priority DESC, run_at, job_id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

UPDATE portq_job
SET state = 'running', attempts = attempts + 1, worker_id = :worker_id,
    lease_until = UTC_TIMESTAMP(6) + INTERVAL (:lease_ms * 1000) MICROSECOND,
    started_at = UTC_TIMESTAMP(6),
    first_started_at = COALESCE(first_started_at, UTC_TIMESTAMP(6))
WHERE job_id IN (:ids);

SELECT job_id, CONVERT(queue USING utf8mb4), payload, priority, attempts, max_attempts,
       CONVERT(job_key USING utf8mb4), lease_until, CONVERT(concurrency_key USING utf8mb4),
       concurrency_limit, timeout_ms, run_at, meta
FROM portq_job
WHERE job_id IN (:ids)
ORDER BY priority DESC, run_at, job_id;

-- name: claim_unkeyed
-- The claim of the queue's unkeyed jobs (their turn in a round): `claim` with
-- concurrency_key IS NULL, walking portq_job_ckey_idx (queue, 'ready', NULL) in order.
-- The ORDER BY names the key (fixed here) first, as the index does: the walk then needs
-- no sort in any plan (PostgreSQL's generic plan sorted every unkeyed ready row without it).
SELECT job_id FROM portq_job
WHERE queue = :queue AND state = 'ready' AND concurrency_key IS NULL
  AND run_at <= UTC_TIMESTAMP(6) AND attempts < max_attempts
  AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
ORDER BY concurrency_key, priority DESC, run_at, job_id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

UPDATE portq_job
SET state = 'running', attempts = attempts + 1, worker_id = :worker_id,
    lease_until = UTC_TIMESTAMP(6) + INTERVAL (:lease_ms * 1000) MICROSECOND,
    started_at = UTC_TIMESTAMP(6),
    first_started_at = COALESCE(first_started_at, UTC_TIMESTAMP(6))
WHERE job_id IN (:ids);

SELECT job_id, CONVERT(queue USING utf8mb4), payload, priority, attempts, max_attempts,
       CONVERT(job_key USING utf8mb4), lease_until, CONVERT(concurrency_key USING utf8mb4),
       concurrency_limit, timeout_ms, run_at, meta
FROM portq_job
WHERE job_id IN (:ids)
ORDER BY priority DESC, run_at, job_id;
