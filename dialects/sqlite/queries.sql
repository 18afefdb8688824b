-- Named statements for SQLite. "now" is
--   CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)   (microseconds, UTC).
-- Claims run inside BEGIN IMMEDIATE (see portq/backends/sqlite.py): one writer at a time,
-- so there is nothing to skip; the select + update below is atomic.

-- name: create_version_table
CREATE TABLE IF NOT EXISTS portq_schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at INTEGER NOT NULL
);

-- name: schema_version
SELECT MAX(version) FROM portq_schema_version;

-- Every applied migration: migrate() applies each version not listed, so that a
-- migration numbered below the newest applied one (merged later) still runs.
-- name: applied_versions
SELECT version FROM portq_schema_version;

-- name: record_version
INSERT INTO portq_schema_version (version, applied_at)
VALUES (:version, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));

-- name: insert_job
INSERT INTO portq_job (queue, payload, priority, run_at, max_attempts, job_key, created_at,
                       concurrency_key, concurrency_limit, timeout_ms, meta)
VALUES (:queue, :payload, :priority,
        COALESCE(:run_at, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :delay_ms * 1000),
        :max_attempts, :key, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
        :concurrency_key, :concurrency_limit, :timeout_ms, :meta)
ON CONFLICT (job_key) DO NOTHING
RETURNING job_id;

-- name: job_id_by_key
SELECT job_id FROM portq_job WHERE job_key = :key;

-- name: claim
UPDATE portq_job
SET state = 'running',
    attempts = attempts + 1,
    worker_id = :worker_id,
    lease_until = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :lease_ms * 1000,
    -- when this attempt (and the first) started: migration 10
    started_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
    first_started_at = COALESCE(first_started_at,
                                CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
WHERE job_id IN (
    SELECT job_id FROM portq_job AS c
    WHERE queue = :queue AND state = 'ready' AND attempts < max_attempts
      AND run_at <= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
      -- a paused queue claims nothing (one primary-key probe)
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
      -- per-key limits: skip a keyed job whose key has its limit of running jobs (a count
      -- on portq_job_ckey_idx; unkeyed rows stop at IS NULL), so a full key never blocks
      -- the jobs behind it. Rows of one claim are filtered against the running jobs before
      -- it, so two of one key may pass together: SqlBackend.settle_keys recounts.
      AND (c.concurrency_key IS NULL
           OR (SELECT count(*) FROM portq_job AS r
               WHERE r.queue = :queue AND r.concurrency_key = c.concurrency_key
                 AND r.state = 'running') < c.concurrency_limit)
    ORDER BY priority DESC, run_at, job_id
    LIMIT :limit)
RETURNING job_id, queue, payload, priority, attempts, max_attempts, job_key, lease_until,
          concurrency_key, concurrency_limit, timeout_ms, run_at, meta;

-- name: renew
UPDATE portq_job
SET lease_until = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :lease_ms * 1000
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running'
  AND lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: complete
UPDATE portq_job
SET state = 'succeeded', worker_id = NULL, lease_until = NULL,
    finished_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running'
  AND lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: complete_many
-- Several completions in one statement (SqlBackend.fenced_many). :claims is a JSON array
-- of {"job_id", "generation", "worker_id"}; each is fenced exactly as `complete`, and the
-- rows returned are the claims that were completed (UPDATE ... FROM needs SQLite 3.33,
-- RETURNING 3.35), with has_dependents: SqlBackend.completed_dependencies releases those
-- jobs' dependents in the same transaction.
UPDATE portq_job
SET state = 'succeeded', worker_id = NULL, lease_until = NULL,
    finished_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
FROM json_each(:claims) AS c
WHERE portq_job.job_id = json_extract(c.value, '$.job_id')
  AND portq_job.attempts = json_extract(c.value, '$.generation')
  AND portq_job.worker_id = json_extract(c.value, '$.worker_id')
  AND portq_job.state = 'running'
  AND portq_job.lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
RETURNING job_id, attempts, has_dependents;

-- name: renew_many
-- Several renewals in one statement (the heartbeat's tick), each fenced as `renew`.
UPDATE portq_job
SET lease_until = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :lease_ms * 1000
FROM json_each(:claims) AS c
WHERE portq_job.job_id = json_extract(c.value, '$.job_id')
  AND portq_job.attempts = json_extract(c.value, '$.generation')
  AND portq_job.worker_id = json_extract(c.value, '$.worker_id')
  AND portq_job.state = 'running'
  AND portq_job.lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
RETURNING job_id, attempts;

-- name: fail
UPDATE portq_job
SET state = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN run_at
                  ELSE CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :retry_ms * 1000 END,
    finished_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts
                       THEN CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) END,
    worker_id = NULL, lease_until = NULL, last_error = :error
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running'
  AND lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: record_error
INSERT INTO portq_job_error (job_id, attempt, worker_id, error, failed_at)
VALUES (:job_id, :generation, :worker_id, :error,
        CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));

-- name: job_errors
SELECT attempt, worker_id, error, failed_at FROM portq_job_error
WHERE job_id = :job_id ORDER BY attempt;

-- name: release
-- Give a claimed job back unstarted (shutdown, a stale look-ahead, a late claim). Its
-- attempt is given back (max_attempts + 1, given_back + 1) while given_back is under the
-- job's own budget (max_attempts - given_back, i.e. 2 * given_back < max_attempts), so a
-- job is never claimed without end without a handler running it; past that the give-back
-- spends the attempt, and a job whose attempts are then spent goes dead, saying why.
UPDATE portq_job
SET state = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN 'ready' ELSE 'dead' END,
    finished_at = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN NULL ELSE CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) END,
    last_error = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN last_error
                      ELSE 'given back unstarted ' || given_back || ' times with its attempt, '
                           || 'then with its last one' END,
    max_attempts = max_attempts + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    given_back = given_back + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    worker_id = NULL, lease_until = NULL,
    run_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running'
  AND lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: reap
UPDATE portq_job
SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at
                  ELSE CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :delay_ms * 1000 END,
    finished_at = CASE WHEN attempts >= max_attempts
                       THEN CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) END,
    last_error = 'lease expired (worker ' || worker_id || ', attempt ' || attempts || ')',
    worker_id = NULL, lease_until = NULL
WHERE job_id IN (
    SELECT job_id FROM portq_job
    WHERE state = 'running'
      AND lease_until <= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
    ORDER BY lease_until
    LIMIT :limit);

-- name: prune
DELETE FROM portq_job
WHERE job_id IN (
    SELECT job_id FROM portq_job
    WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
      AND finished_at < CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - :older_than_ms * 1000
      -- never a result an unfinished dependent may still read (migration 12)
      AND NOT EXISTS (SELECT 1 FROM portq_job_dep AS d JOIN portq_job AS w ON w.job_id = d.job_id
                      WHERE d.depends_on = portq_job.job_id
                        AND w.state IN ('waiting', 'ready', 'running'))
    ORDER BY finished_at
    LIMIT :limit);

-- name: retry_dead
-- The attempts it had left plus :extra (a job cancelled before it ran keeps its whole
-- budget), saturating at the largest INT instead of overflowing.
UPDATE portq_job
SET state = 'ready', finished_at = NULL,
    max_attempts = max_attempts + CASE WHEN :extra < 2147483647 - max_attempts
                                      THEN :extra ELSE 2147483647 - max_attempts END,
    run_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE job_id = :job_id AND state IN ('dead', 'cancelled');

-- name: cancel
UPDATE portq_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL, deps_left = 0,
    finished_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE job_id = :job_id AND state IN ('ready', 'running', 'waiting');

-- name: stats
SELECT queue,
       SUM(CASE WHEN state = 'ready' AND run_at <= n.now THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'ready' AND run_at > n.now THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'running' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'succeeded' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'dead' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'cancelled' THEN 1 ELSE 0 END),
       MIN(CASE WHEN state = 'ready' AND run_at <= n.now THEN run_at END),
       MAX(n.now),
       SUM(CASE WHEN state = 'waiting' THEN 1 ELSE 0 END)
FROM portq_job
CROSS JOIN (SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) AS now) AS n
WHERE :queue = '*' OR queue = :queue
GROUP BY queue;

-- name: pending
-- Whether the queue has a job ready and due, and whether it has one running (a burst
-- worker's exit test). Each EXISTS stops at the first entry of the partial ready or running
-- index, so its cost does not grow with the table; `stats` counts every row of the queue
-- instead.
SELECT EXISTS (SELECT 1 FROM portq_job
               WHERE queue = :queue AND state = 'ready'
                 AND run_at <= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
       EXISTS (SELECT 1 FROM portq_job WHERE queue = :queue AND state = 'running');

-- Listing jobs (portq jobs, the dashboard), paged by key: after_id/after_run_at are the
-- last row of the previous page (after_id = 0 on the first page). Filters: state, queue,
-- payload text (lower-cased LIKE pattern, '!' escapes). Three orders. (A key filter is a
-- job_id_by_key lookup instead: at most one job, by the unique index.)
-- name: jobs
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR lower(payload) LIKE :pattern ESCAPE '!')
  AND job_id > :after_id
ORDER BY job_id
LIMIT :limit;

-- name: jobs_newest
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR lower(payload) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR job_id < :after_id)
ORDER BY job_id DESC
LIMIT :limit;

-- name: jobs_by_run_at
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR lower(payload) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR run_at > :after_run_at
       OR (run_at = :after_run_at AND job_id > :after_id))
ORDER BY run_at, job_id
LIMIT :limit;

-- name: job
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at,
       given_back + snoozes AS released, meta, started_at, first_started_at
FROM portq_job
WHERE job_id = :job_id;

-- Bulk operator actions (portq retry/cancel --queue Q --state S): one bounded batch each.
-- name: retry_many
UPDATE portq_job
SET state = 'ready', max_attempts = attempts + :extra, finished_at = NULL,
    run_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE job_id IN (
    SELECT job_id FROM portq_job
    WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
    ORDER BY job_id
    LIMIT :limit)
RETURNING job_id;

-- name: cancel_many
UPDATE portq_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL, deps_left = 0,
    finished_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE job_id IN (
    SELECT job_id FROM portq_job
    WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
    ORDER BY job_id
    LIMIT :limit);

-- What `portq conformance` prints first: server version, isolation of portq's transactions
-- (SQLite's are serializable: one writer at a time, BEGIN IMMEDIATE).
-- name: server_info
SELECT sqlite_version(), 'SERIALIZABLE';

-- Does a table of this prefix exist (before `portq conformance` drops it)?
-- name: table_exists
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name;

-- `portq stats` over the last :window_ms: failed attempts recorded (portq_job_error) and
-- jobs that succeeded, per queue (retry_rate = failed / (failed + succeeded)).
-- name: attempt_stats
SELECT queue, SUM(failed), SUM(succeeded)
FROM (
    SELECT j.queue AS queue, 1 AS failed, 0 AS succeeded
    FROM portq_job_error AS e JOIN portq_job AS j ON j.job_id = e.job_id
    WHERE e.failed_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - :window_ms * 1000
      AND (:queue = '*' OR j.queue = :queue)
    UNION ALL
    SELECT queue, 0, 1
    FROM portq_job
    WHERE state = 'succeeded' AND finished_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - :window_ms * 1000
      AND (:queue = '*' OR queue = :queue)
) AS a
GROUP BY queue;

-- Jobs finished per minute over the last :minutes minutes (the dashboard's charts); walks
-- the finished index.
-- name: finished_per_minute
SELECT queue, state,
       (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - finished_at) / 60000000,
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
                    - :minutes * 60000000
GROUP BY 1, 2, 3;

-- name: delete_finished
DELETE FROM portq_job
WHERE job_id = :job_id AND state IN ('succeeded', 'dead', 'cancelled');

-- The worker registry (migration 3). A heartbeat first deletes the rows of workers whose
-- heartbeats stopped, then renews its own row (inserting it when it is missing).
-- name: expire_workers
DELETE FROM portq_worker WHERE expires_at <= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: register_worker
INSERT INTO portq_worker (worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules,
                          started_at, heartbeat_at, expires_at)
VALUES (:worker_id, :host, :pid, :queues, :concurrency, :jobs_in_hand, :schedules, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
        CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER), CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :ttl_ms * 1000);

-- name: worker_heartbeat
UPDATE portq_worker
SET jobs_in_hand = :jobs_in_hand, schedules = :schedules, heartbeat_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
    expires_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :ttl_ms * 1000
WHERE worker_id = :worker_id;

-- name: deregister_worker
DELETE FROM portq_worker WHERE worker_id = :worker_id;

-- name: workers
SELECT worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules, started_at,
       heartbeat_at, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
FROM portq_worker
WHERE expires_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
ORDER BY started_at, worker_id;

-- Results (migration 5). store_result runs lock_owned_job, then delete_result and
-- insert_result, in one transaction (BEGIN IMMEDIATE already holds the write lock): the
-- result is written only while the claim still owns the job.
-- name: lock_owned_job
SELECT job_id FROM portq_job
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running'
  AND lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: delete_result
DELETE FROM portq_result WHERE job_id = :job_id;

-- name: insert_result
INSERT INTO portq_result (job_id, generation, result, stored_at)
VALUES (:job_id, :generation, :result,
        CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));

-- name: job_result
SELECT r.result FROM portq_result r JOIN portq_job j ON j.job_id = r.job_id
WHERE r.job_id = :job_id AND j.state = 'succeeded';

-- name: unique_ensure
-- Scoped uniqueness: make the scoped key's row exist (taking the write lock), so that the
-- next statement can read it. See schema.sql, migration 6.
INSERT INTO portq_job_unique (unique_hash, job_id) VALUES (:hash, NULL)
ON CONFLICT (unique_hash) DO NOTHING;

-- name: unique_lock
-- The scoped key's latest job id (NULL when none or pruned); the write lock is held.
SELECT job_id FROM portq_job_unique WHERE unique_hash = :hash;

-- name: unique_job
-- That job's state, and whether it was created less than :period_ms ago (1 when
-- :period_ms is NULL).
SELECT state,
       CASE WHEN :period_ms IS NULL OR created_at >
                 CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - :period_ms * 1000
            THEN 1 ELSE 0 END
FROM portq_job WHERE job_id = :job_id;

-- name: unique_point
UPDATE portq_job_unique SET job_id = :job_id WHERE unique_hash = :hash;

-- name: set_paused
-- Pause (:paused = 1) or resume (0) a queue; the row is made on first use.
INSERT INTO portq_queue (queue, paused, updated_at)
VALUES (:queue, :paused, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: paused_queues
SELECT queue FROM portq_queue WHERE paused = 1 ORDER BY queue;

-- name: queue_limits
-- Every queue with a portq_queue row (portq stats): paused, running limit, rate limit,
-- fair (migration 13).
SELECT queue, paused, concurrency_limit, rate_limit, rate_period_ms, fair
FROM portq_queue WHERE :queue = '*' OR queue = :queue;

-- name: queue_control
-- The queue's limits, read in the claim's transaction (BEGIN IMMEDIATE holds the write
-- lock: concurrent claimers take turns). No row: no limit.
SELECT concurrency_limit, rate_limit, rate_period_ms, rate_log, fair, fair_after
FROM portq_queue WHERE queue = :queue;

-- name: running_count
SELECT COUNT(*) FROM portq_job WHERE queue = :queue AND state = 'running';

-- name: set_concurrency_limit
-- At most :max_running running jobs of the queue (NULL: no limit); the row is made on
-- first use.
INSERT INTO portq_queue (queue, concurrency_limit, updated_at)
VALUES (:queue, :max_running, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
ON CONFLICT (queue) DO UPDATE SET concurrency_limit = excluded.concurrency_limit,
                                  updated_at = excluded.updated_at;

-- name: set_rate_limit
-- At most :rate_limit jobs of the queue started per :period_ms (NULLs: no rate limit, and
-- the log is cleared); the row is made on first use. A changed limit keeps the log.
INSERT INTO portq_queue (queue, rate_limit, rate_period_ms, updated_at)
VALUES (:queue, :rate_limit, :period_ms, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
ON CONFLICT (queue) DO UPDATE SET
    rate_limit = excluded.rate_limit, rate_period_ms = excluded.rate_period_ms,
    rate_log = CASE WHEN excluded.rate_limit IS NULL THEN NULL ELSE portq_queue.rate_log END,
    updated_at = excluded.updated_at;

-- name: db_clock_ms
-- The clock in epoch milliseconds (the claim holds the write lock already).
SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);

-- name: set_rate_log
UPDATE portq_queue SET rate_log = :rate_log WHERE queue = :queue;

-- name: ensure_queue
-- The queue's row, made if missing (the other engines lock it; here the write lock is
-- already held, so it is only made).
INSERT INTO portq_queue (queue, updated_at) VALUES (:queue, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
ON CONFLICT (queue) DO NOTHING;

-- name: key_running_count
SELECT count(*) FROM portq_job
WHERE queue = :queue AND concurrency_key = :concurrency_key AND state = 'running';

-- name: unclaim
-- Put back a job this claim took beyond its key's limit: ready again, attempt undone.
UPDATE portq_job
SET state = 'ready', attempts = attempts - 1, worker_id = NULL, lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running';

-- name: next_lease_expiry_ms
-- Milliseconds until the earliest running lease expires (negative: already expired; NULL:
-- nothing runs); lease_until is epoch microseconds. min() reads the first entry of
-- portq_job_lease_idx (running rows only).
SELECT (min(lease_until) - CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
       / 1000
FROM portq_job WHERE state = 'running';

-- name: snooze
-- A handler raised portq.Snooze: back to ready after :delay_ms without spending the attempt
-- (max_attempts + 1), at most :max_snoozes times per job (then nothing changes and the
-- worker records the attempt as failed instead); fenced like every owner's write.
UPDATE portq_job
SET state = 'ready', run_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :delay_ms * 1000,
    max_attempts = max_attempts + 1, snoozes = snoozes + 1, worker_id = NULL,
    lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
  AND snoozes < :max_snoozes;

-- Progress (migration 11): the running job's last report, fenced like every write of its
-- owner (job, generation, worker, running, lease not expired); rowcount 1 = written.
-- name: set_progress
UPDATE portq_job
SET progress = :progress, progress_note = :note,
    progress_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running'
  AND lease_until > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: worker_activity
-- The dashboard's Workers page: each live worker's row expiry and the running jobs the job
-- table says it holds (the partial index portq_job_lease_idx holds only running rows).
SELECT w.worker_id, w.expires_at, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
       (SELECT count(*) FROM portq_job j
        WHERE j.state = 'running' AND j.lease_until IS NOT NULL AND j.worker_id = w.worker_id)
FROM portq_worker w
WHERE w.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- name: job_concurrency
-- A job's per-key limit (enqueue(concurrency_key=, concurrency_limit=)), for its page.
SELECT concurrency_key, concurrency_limit FROM portq_job WHERE job_id = :job_id;

-- name: queue_key_limits
-- The queue page's per-key limits in use: the keys of the queue's running jobs, each with
-- its limit and running count, busiest first (portq_job_ckey_idx: running rows only).
SELECT concurrency_key, max(concurrency_limit), count(*)
FROM portq_job
WHERE queue = :queue AND state = 'running' AND concurrency_key IS NOT NULL
GROUP BY concurrency_key
ORDER BY count(*) DESC, concurrency_key
LIMIT :limit;

-- ---- throughput and latency statistics (Queue.job_stats; portq stats; the dashboard) ----
-- Both read only the jobs that finished within the window, walking portq_job_finished_idx
-- over that range: the cost follows the rows in the window, never the table (EXPLAIN
-- QUERY PLAN in docs/engines.md, "Job statistics"). Times are microseconds since the epoch.

-- name: stats_series
-- Jobs finished per bucket of :bucket_s seconds over the last :window_s seconds, per queue
-- and state (bucket 0 the current one).
SELECT queue, state,
       (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - finished_at)
           / (:bucket_s * 1000000),
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
                    - :window_s * 1000000
GROUP BY 1, 2, 3;

-- name: stats_latency
-- Wait (created -> first start) and run (latest start -> finish) time of the succeeded and
-- dead jobs of the window, as counts per queue and pair of log buckets: bucket b holds
-- durations from 2^(b/4) ms (durations under 1 ms fall in bucket 0); NULL when the job has
-- no start time. log2() is one of SQLite's math functions (3.35+, on in its default build).
-- The index's own state filter is kept so that the partial index applies.
SELECT queue,
       CAST(4 * log2(max((first_started_at - created_at) / 1000.0, 1)) AS INTEGER),
       CAST(4 * log2(max((finished_at - started_at) / 1000.0, 1)) AS INTEGER),
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled') AND state <> 'cancelled'
  AND finished_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
                    - :window_s * 1000000
GROUP BY 1, 2, 3;

-- ---- job dependencies (migration 12; portq/backends/dependencies.py) -------------------
-- Every write transaction holds SQLite's one write lock: no row locks are needed.
-- name: dep_lock
SELECT job_id, state FROM portq_job
WHERE job_id IN (:dep_ids)
ORDER BY job_id;

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
UPDATE portq_job
SET state = CASE WHEN deps_left = 1 THEN 'ready' ELSE state END, deps_left = deps_left - 1
WHERE state = 'waiting' AND (:every = 1 OR dep_failure = 1)
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- name: dep_cancel_ids
SELECT job_id, has_dependents FROM portq_job
WHERE state = 'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- name: dep_cancel
UPDATE portq_job
SET state = 'cancelled', deps_left = 0, finished_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER), last_error = :error
WHERE state = 'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- name: dep_cancel_job
UPDATE portq_job SET state = 'cancelled', finished_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER), last_error = :error
WHERE job_id = :job_id AND state = 'ready';

-- name: dep_resolve
UPDATE portq_job_dep SET resolved = 1 WHERE depends_on = :job_id AND resolved = 0;

-- name: dep_unflag
UPDATE portq_job SET has_dependents = 0 WHERE job_id = :job_id;

-- name: dep_unsettled
SELECT job_id, state FROM portq_job
WHERE has_dependents = 1 AND state IN ('dead', 'cancelled')
ORDER BY job_id;

-- Retrying a dependency (retry_dead, retry_many; dependencies.revive) revives the
-- dependents its failure cancelled: those cancelled with the reason naming it
-- (dependencies.failure_reason's text), locked; then each is checked and reopened.
-- name: dep_revive_ids
SELECT j.job_id FROM portq_job_dep AS d
JOIN portq_job AS j ON j.job_id = d.job_id
WHERE d.depends_on IN (:dep_ids) AND j.state = 'cancelled'
  AND j.last_error IN ('cancelled: its dependency, job ' || d.depends_on || ', ended dead',
                       'cancelled: its dependency, job ' || d.depends_on || ', ended cancelled')
ORDER BY j.job_id;

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
VALUES (:queue, :fair, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
ON CONFLICT (queue) DO UPDATE SET fair = excluded.fair, fair_after = NULL,
                                  updated_at = excluded.updated_at;

-- name: set_fair_after
-- The key a fair claim served last (NULL: the unkeyed jobs' turn), under the write lock.
UPDATE portq_queue SET fair_after = :after WHERE queue = :queue;

-- name: fair_first_key
-- The smallest key with a ready job (portq_job_fair_idx: one seek; NULLs sort first, the
-- IS NOT NULL bound skips them).
SELECT concurrency_key FROM portq_job
WHERE queue = :queue AND state = 'ready' AND concurrency_key IS NOT NULL
ORDER BY concurrency_key
LIMIT 1;

-- name: fair_next_key
-- The next key after :after with a ready job (one seek on portq_job_fair_idx).
SELECT concurrency_key FROM portq_job
WHERE queue = :queue AND state = 'ready' AND concurrency_key > :after
ORDER BY concurrency_key
LIMIT 1;

-- name: claim_key
-- The claim of one key's jobs: `claim` with the key fixed, walking portq_job_fair_idx
-- (queue, concurrency_key, priority DESC, run_at, job_id) in order.
UPDATE portq_job
SET state = 'running', attempts = attempts + 1, worker_id = :worker_id,
    lease_until = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :lease_ms * 1000,
    started_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
    first_started_at = COALESCE(first_started_at, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
WHERE job_id IN (
    SELECT job_id FROM portq_job AS c
    WHERE queue = :queue AND concurrency_key = :concurrency_key AND state = 'ready' AND attempts < max_attempts
      AND run_at <= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
      AND (SELECT count(*) FROM portq_job AS r
           WHERE r.queue = :queue AND r.concurrency_key = :concurrency_key
             AND r.state = 'running') < c.concurrency_limit
    ORDER BY concurrency_key, priority DESC, run_at, job_id
    LIMIT :limit)
RETURNING job_id, queue, payload, priority, attempts, max_attempts, job_key, lease_until,
          concurrency_key, concurrency_limit, timeout_ms, run_at, meta;

-- name: claim_unkeyed
-- The claim of the queue's unkeyed jobs (their turn in a round): `claim` with
-- concurrency_key IS NULL, walking portq_job_fair_idx's NULL-key entries in order.
-- The ORDER BY names the key (fixed here) first, as the index does: the walk then needs
-- no sort in any plan (PostgreSQL's generic plan sorted every unkeyed ready row without it).
UPDATE portq_job
SET state = 'running', attempts = attempts + 1, worker_id = :worker_id,
    lease_until = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + :lease_ms * 1000,
    started_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER),
    first_started_at = COALESCE(first_started_at, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
WHERE job_id IN (
    SELECT job_id FROM portq_job AS c
    WHERE queue = :queue AND concurrency_key IS NULL AND state = 'ready' AND attempts < max_attempts
      AND run_at <= CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
    ORDER BY concurrency_key, priority DESC, run_at, job_id
    LIMIT :limit)
RETURNING job_id, queue, payload, priority, attempts, max_attempts, job_key, lease_until,
          concurrency_key, concurrency_limit, timeout_ms, run_at, meta;
