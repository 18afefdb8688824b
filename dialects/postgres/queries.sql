-- Named statements for PostgreSQL. Durations arrive in milliseconds and are added to the
-- database clock: now() + :lease_ms * interval '1 millisecond'.

-- name: create_version_table
CREATE TABLE IF NOT EXISTS portq_schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migration_lock
SELECT pg_advisory_xact_lock(hashtext('portq_schema_version'));

-- name: schema_version
SELECT max(version) FROM portq_schema_version;

-- Every applied migration: migrate() applies each version not listed, so that a
-- migration numbered below the newest applied one (merged later) still runs.
-- name: applied_versions
SELECT version FROM portq_schema_version;

-- name: record_version
INSERT INTO portq_schema_version (version) VALUES (:version);

-- name: insert_job
INSERT INTO portq_job (queue, payload, priority, run_at, max_attempts, job_key,
                       concurrency_key, concurrency_limit, timeout_ms, meta)
VALUES (:queue, CAST(:payload AS jsonb), :priority,
        COALESCE(CAST(:run_at AS timestamptz), now() + :delay_ms * interval '1 millisecond'),
        :max_attempts, :key, :concurrency_key, CAST(:concurrency_limit AS integer),
        CAST(:timeout_ms AS integer), CAST(:meta AS jsonb))
ON CONFLICT (job_key) DO NOTHING
RETURNING job_id;

-- name: notify
SELECT pg_notify(:channel, '');

-- name: job_id_by_key
SELECT job_id FROM portq_job WHERE job_key = :key;

-- name: insert_jobs_bulk
-- Many jobs in one statement (PostgresBackend.insert_jobs). :jobs is a JSON array of
-- {"queue", "payload" (JSON text), "priority", "run_at", "delay_ms", "max_attempts",
-- "job_key", "concurrency_key", "concurrency_limit", "timeout_ms", "meta" (JSON text or null)};
-- ids are drawn in array order, so they ascend as the jobs were given, and each row
-- says whether it was inserted or its key already existed.
WITH src AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('portq_job', 'job_id')) AS job_id, t.*
    FROM jsonb_to_recordset(CAST(:jobs AS jsonb))
         AS t(queue text, payload text, priority integer, run_at timestamptz,
              delay_ms bigint, max_attempts integer, job_key text, concurrency_key text,
              concurrency_limit integer, timeout_ms integer, meta text)
), ins AS (
    INSERT INTO portq_job (job_id, queue, payload, priority, run_at, max_attempts, job_key,
                           concurrency_key, concurrency_limit, timeout_ms, meta)
    OVERRIDING SYSTEM VALUE
    SELECT job_id, queue, CAST(payload AS jsonb), priority,
           COALESCE(run_at, now() + delay_ms * interval '1 millisecond'), max_attempts,
           job_key, concurrency_key, concurrency_limit, timeout_ms, CAST(meta AS jsonb)
    FROM src
    ORDER BY job_id
    ON CONFLICT (job_key) DO NOTHING
    RETURNING job_id
)
SELECT src.job_id, src.job_key, ins.job_id IS NOT NULL
FROM src LEFT JOIN ins ON ins.job_id = src.job_id
ORDER BY src.job_id;

-- name: claim
-- Every LIMIT … FOR UPDATE SKIP LOCKED selection here is a MATERIALIZED CTE, evaluated
-- once: as a FROM subquery the planner may rescan it (inner side of a nested loop), and
-- each rescan's LockRows skips the rows this statement already updated and locks the next
-- ones, so more than :limit rows would change (PostgreSQL bug report #15715).
WITH c AS MATERIALIZED (
    SELECT job_id FROM portq_job
    WHERE queue = :queue AND state = 'ready' AND run_at <= now()
      AND attempts < max_attempts
      -- a paused queue claims nothing: one primary-key probe, a one-time filter
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused)
      -- per-key limits: skip a keyed job whose key has its limit of running jobs (a count
      -- on portq_job_ckey_idx; unkeyed rows stop at IS NULL), so a full key never blocks
      -- the jobs behind it. Racy between claimers: SqlBackend.settle_keys recounts.
      AND (concurrency_key IS NULL
           OR (SELECT count(*) FROM portq_job AS r
               WHERE r.queue = :queue AND r.concurrency_key = portq_job.concurrency_key
                 AND r.state = 'running') < concurrency_limit)
    ORDER BY priority DESC, run_at, job_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE portq_job AS j
SET state = 'running',
    attempts = j.attempts + 1,
    worker_id = :worker_id,
    lease_until = now() + :lease_ms * interval '1 millisecond',
    -- when this attempt (and the first) started: migration 10
    started_at = now(),
    first_started_at = COALESCE(j.first_started_at, now())
FROM c
WHERE j.job_id = c.job_id
RETURNING j.job_id, j.queue, j.payload::text, j.priority, j.attempts, j.max_attempts,
          j.job_key, j.lease_until, j.concurrency_key, j.concurrency_limit, j.timeout_ms, j.run_at,
          j.meta::text AS meta;

-- name: renew
UPDATE portq_job
SET lease_until = now() + :lease_ms * interval '1 millisecond'
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > now();

-- name: complete
UPDATE portq_job
SET state = 'succeeded', worker_id = NULL, lease_until = NULL, finished_at = now()
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > now();

-- name: complete_many
-- Several completions in one statement (SqlBackend.fenced_many). :claims is a JSON array
-- of {"job_id", "generation", "worker_id"}; each is fenced exactly as `complete`, and the
-- rows returned are the claims that were completed. A completed job that is someone's
-- dependency (has_dependents, migration 12) resolves its unresolved edges and counts them
-- off its waiting dependents, which become ready at zero, in this same statement: each
-- dependent's row lock serialises two dependencies finishing at once, and its UPDATE
-- re-reads deps_left after the wait (READ COMMITTED), so the last one releases it, once.
-- For jobs without dependents the two later steps join no row. A dependent made ready is
-- announced on its queue's channel as an enqueue announces a job, at this statement's
-- commit (PostgresBackend.channel: prefix + queue, or past 63 bytes prefix + the first 40
-- hex digits of the queue's SHA-256).
WITH done AS (
    UPDATE portq_job AS j
    SET state = 'succeeded', worker_id = NULL, lease_until = NULL, finished_at = now()
    FROM jsonb_to_recordset(CAST(:claims AS jsonb))
         AS c(job_id bigint, generation integer, worker_id text)
    WHERE j.job_id = c.job_id AND j.attempts = c.generation AND j.worker_id = c.worker_id
      AND j.state = 'running' AND j.lease_until > now()
    RETURNING j.job_id, j.attempts, j.has_dependents
), resolved AS (
    UPDATE portq_job_dep AS d
    SET resolved = 1
    FROM done
    WHERE done.has_dependents = 1 AND d.depends_on = done.job_id AND d.resolved = 0
    RETURNING d.job_id
), released AS (
    UPDATE portq_job AS w
    SET state = CASE WHEN w.deps_left = r.n THEN 'ready' ELSE w.state END,
        deps_left = w.deps_left - r.n
    FROM (SELECT job_id, count(*) AS n FROM resolved GROUP BY job_id) AS r
    WHERE w.job_id = r.job_id AND w.state = 'waiting'
    RETURNING w.queue, w.state
), announced AS (
    SELECT count(pg_notify(CASE WHEN octet_length('portq_' || queue) <= 63 THEN 'portq_' || queue
                                ELSE 'portq_' || left(encode(sha256(convert_to(queue, 'UTF8')), 'hex'), 40) END,
                           '')) AS n
    FROM (SELECT DISTINCT queue FROM released WHERE state = 'ready') AS q
)
SELECT job_id, attempts FROM done, announced;

-- name: renew_many
-- Several renewals in one statement (the heartbeat's tick), each fenced as `renew`; the
-- rows returned are the claims whose lease was extended.
UPDATE portq_job AS j
SET lease_until = now() + :lease_ms * interval '1 millisecond'
FROM jsonb_to_recordset(CAST(:claims AS jsonb))
     AS c(job_id bigint, generation integer, worker_id text)
WHERE j.job_id = c.job_id AND j.attempts = c.generation AND j.worker_id = c.worker_id
  AND j.state = 'running' AND j.lease_until > now()
RETURNING j.job_id, j.attempts;

-- name: fail
UPDATE portq_job
SET state = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN run_at
                  ELSE now() + :retry_ms * interval '1 millisecond' END,
    finished_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN now() END,
    worker_id = NULL, lease_until = NULL, last_error = :error
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > now();

-- name: record_error
INSERT INTO portq_job_error (job_id, attempt, worker_id, error)
VALUES (:job_id, :generation, :worker_id, :error);

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
    finished_at = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN NULL ELSE now() END,
    last_error = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN last_error
                      ELSE 'given back unstarted ' || given_back || ' times with its attempt, '
                           || 'then with its last one' END,
    max_attempts = max_attempts + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    given_back = given_back + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    worker_id = NULL, lease_until = NULL, run_at = now()
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > now();

-- name: reap
WITH c AS MATERIALIZED (
    SELECT job_id FROM portq_job
    WHERE state = 'running' AND lease_until <= now()
    ORDER BY lease_until
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE portq_job AS j
SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                  ELSE now() + :delay_ms * interval '1 millisecond' END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    last_error = 'lease expired (worker ' || j.worker_id || ', attempt ' || j.attempts || ')',
    worker_id = NULL, lease_until = NULL
FROM c
WHERE j.job_id = c.job_id;

-- name: prune
WITH c AS MATERIALIZED (
    SELECT job_id FROM portq_job
    WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
      AND finished_at < now() - :older_than_ms * interval '1 millisecond'
      -- never a result an unfinished dependent may still read (migration 12). The
      -- dependent's state is a scalar subquery keyed by its id, never a join: with stale
      -- statistics (a table grown since its last ANALYZE) a join let the planner scan the
      -- job table's primary key once per candidate row (10,000 rows: minutes)
      AND NOT EXISTS (SELECT 1 FROM portq_job_dep AS d
                      WHERE d.depends_on = portq_job.job_id
                        AND (SELECT w.state FROM portq_job AS w WHERE w.job_id = d.job_id)
                            IN ('waiting', 'ready', 'running'))
    ORDER BY finished_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM portq_job AS j
USING c
WHERE j.job_id = c.job_id;

-- name: retry_dead
-- The attempts it had left plus :extra (a job cancelled before it ran keeps its whole
-- budget), saturating at the largest INT instead of overflowing.
UPDATE portq_job
SET state = 'ready', finished_at = NULL,
    max_attempts = max_attempts + CASE WHEN :extra < 2147483647 - max_attempts
                                      THEN :extra ELSE 2147483647 - max_attempts END,
    run_at = now()
WHERE job_id = :job_id AND state IN ('dead', 'cancelled');

-- Cancelling a running job tells its worker at once: pg_notify on the prefix's cancel
-- channel, payload "job_id generation", delivered at commit (its listener then sets
-- job.cancelled(); the heartbeat's refused renewal is the fallback). One row per job
-- cancelled; `old` is the locked row as it was, to notify only for running ones.
-- name: cancel
WITH old AS (
    SELECT job_id, state FROM portq_job
    WHERE job_id = :job_id AND state IN ('ready', 'running', 'waiting')
    FOR UPDATE
), cancelled AS (
    UPDATE portq_job AS j
    SET state = 'cancelled', worker_id = NULL, lease_until = NULL, finished_at = now(),
        deps_left = 0
    FROM old
    WHERE j.job_id = old.job_id AND j.state IN ('ready', 'running', 'waiting')
    RETURNING j.job_id, j.attempts, old.state AS was
)
SELECT job_id, CASE WHEN was = 'running'
                    THEN pg_notify('portq_#cancel', job_id || ' ' || attempts) END
FROM cancelled;

-- name: stats
SELECT queue,
       count(*) FILTER (WHERE state = 'ready' AND run_at <= now()),
       count(*) FILTER (WHERE state = 'ready' AND run_at > now()),
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'succeeded'),
       count(*) FILTER (WHERE state = 'dead'),
       count(*) FILTER (WHERE state = 'cancelled'),
       min(run_at) FILTER (WHERE state = 'ready' AND run_at <= now()),
       now(),
       count(*) FILTER (WHERE state = 'waiting')
FROM portq_job
WHERE :queue = '*' OR queue = :queue
GROUP BY queue;

-- name: pending
-- Whether the queue has a job ready and due, and whether it has one running (a burst
-- worker's exit test). Each EXISTS stops at the first entry of the partial ready or running
-- index, so its cost does not grow with the table; `stats` counts every row of the queue
-- instead. A ready row another session holds locked counts as the claim sees it: not
-- there (FOR UPDATE SKIP LOCKED, as the claim; the lock is this short transaction's), so
-- a burst worker exits instead of waiting for that session.
SELECT EXISTS (SELECT 1 FROM portq_job
               WHERE queue = :queue AND state = 'ready' AND run_at <= now()
               FOR UPDATE SKIP LOCKED),
       EXISTS (SELECT 1 FROM portq_job WHERE queue = :queue AND state = 'running');

-- Listing jobs (portq jobs, the dashboard), paged by key: after_id/after_run_at are the
-- last row of the previous page (after_id = 0 on the first page). Filters: state, queue,
-- payload text (lower-cased LIKE pattern, '!' escapes). Three orders. (A key filter is a
-- job_id_by_key lookup instead: at most one job, by the unique index.)
-- name: jobs
SELECT job_id, queue, state, payload::text, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR lower(payload::text) LIKE :pattern ESCAPE '!')
  AND job_id > :after_id
ORDER BY job_id
LIMIT :limit;

-- name: jobs_newest
SELECT job_id, queue, state, payload::text, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR lower(payload::text) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR job_id < :after_id)
ORDER BY job_id DESC
LIMIT :limit;

-- name: jobs_by_run_at
SELECT job_id, queue, state, payload::text, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR lower(payload::text) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR run_at > :after_run_at
       OR (run_at = :after_run_at AND job_id > :after_id))
ORDER BY run_at, job_id
LIMIT :limit;

-- name: job
SELECT job_id, queue, state, payload::text, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at,
       given_back + snoozes AS released, meta::text, started_at, first_started_at
FROM portq_job
WHERE job_id = :job_id;

-- Bulk operator actions (portq retry/cancel --queue Q --state S): one bounded batch each,
-- skipping rows a worker holds locked at this moment.
-- name: retry_many
WITH c AS MATERIALIZED (
    SELECT job_id FROM portq_job
    WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
    ORDER BY job_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE portq_job AS j
SET state = 'ready', max_attempts = j.attempts + :extra, finished_at = NULL, run_at = now()
FROM c
WHERE j.job_id = c.job_id AND j.state IN (:states)
RETURNING j.job_id;

-- Running jobs' workers are told as by `cancel`.
-- name: cancel_many
WITH old AS MATERIALIZED (
    SELECT job_id, state FROM portq_job
    WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
    ORDER BY job_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE portq_job AS j
    SET state = 'cancelled', worker_id = NULL, lease_until = NULL, finished_at = now(),
        deps_left = 0
    FROM old
    WHERE j.job_id = old.job_id AND j.state IN (:states)
    RETURNING j.job_id, j.attempts, old.state AS was
)
SELECT job_id, CASE WHEN was = 'running'
                    THEN pg_notify('portq_#cancel', job_id || ' ' || attempts) END
FROM cancelled;

-- What `portq conformance` prints first: server version, session isolation level.
-- name: server_info
SELECT current_setting('server_version'), upper(current_setting('transaction_isolation'));

-- Does a table of this prefix exist (before `portq conformance` drops it)?
-- name: table_exists
SELECT 1 WHERE to_regclass(:name) IS NOT NULL;

-- `portq stats` over the last :window_ms: failed attempts recorded (portq_job_error) and
-- jobs that succeeded, per queue (retry_rate = failed / (failed + succeeded)).
-- name: attempt_stats
SELECT queue, SUM(failed), SUM(succeeded)
FROM (
    SELECT j.queue AS queue, 1 AS failed, 0 AS succeeded
    FROM portq_job_error AS e JOIN portq_job AS j ON j.job_id = e.job_id
    WHERE e.failed_at > now() - :window_ms * interval '1 millisecond'
      AND (:queue = '*' OR j.queue = :queue)
    UNION ALL
    SELECT queue, 0, 1
    FROM portq_job
    WHERE state = 'succeeded' AND finished_at > now() - :window_ms * interval '1 millisecond'
      AND (:queue = '*' OR queue = :queue)
) AS a
GROUP BY queue;

-- Jobs finished per minute over the last :minutes minutes (the dashboard's charts); walks
-- the finished index.
-- name: finished_per_minute
SELECT queue, state, floor(extract(epoch FROM now() - finished_at) / 60)::integer, count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at > now() - :minutes * interval '1 minute'
GROUP BY 1, 2, 3;

-- name: delete_finished
DELETE FROM portq_job
WHERE job_id = :job_id AND state IN ('succeeded', 'dead', 'cancelled');

-- The worker registry (migration 3). A heartbeat first deletes the rows of workers whose
-- heartbeats stopped, then renews its own row (inserting it when it is missing).
-- name: expire_workers
DELETE FROM portq_worker WHERE expires_at <= now();

-- name: register_worker
INSERT INTO portq_worker (worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules,
                          started_at, heartbeat_at, expires_at)
VALUES (:worker_id, :host, :pid, :queues, :concurrency, :jobs_in_hand, :schedules, now(),
        now(), now() + :ttl_ms * interval '1 millisecond');

-- name: worker_heartbeat
UPDATE portq_worker
SET jobs_in_hand = :jobs_in_hand, schedules = :schedules, heartbeat_at = now(),
    expires_at = now() + :ttl_ms * interval '1 millisecond'
WHERE worker_id = :worker_id;

-- name: deregister_worker
DELETE FROM portq_worker WHERE worker_id = :worker_id;

-- name: workers
SELECT worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules, started_at,
       heartbeat_at, now()
FROM portq_worker
WHERE expires_at > now()
ORDER BY started_at, worker_id;

-- Results (migration 5). store_result runs lock_owned_job (which locks the job row, so no
-- reap or claim can take the job meanwhile), then delete_result and insert_result, in one
-- transaction: the result is written only while the claim still owns the job.
-- name: lock_owned_job
SELECT job_id FROM portq_job
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > now()
FOR UPDATE;

-- name: delete_result
DELETE FROM portq_result WHERE job_id = :job_id;

-- name: insert_result
INSERT INTO portq_result (job_id, generation, result)
VALUES (:job_id, :generation, CAST(:result AS jsonb));

-- name: job_result
SELECT r.result::text FROM portq_result r JOIN portq_job j ON j.job_id = r.job_id
WHERE r.job_id = :job_id AND j.state = 'succeeded';

-- name: unique_ensure
-- Scoped uniqueness: make the scoped key's row exist, so that the next statement can lock
-- it (a concurrent enqueue of the same key waits there). See schema.sql, migration 6.
INSERT INTO portq_job_unique (unique_hash, job_id) VALUES (:hash, NULL)
ON CONFLICT (unique_hash) DO NOTHING;

-- name: unique_lock
-- Lock the scoped key's row: its latest job id (NULL when none or pruned). A waiter re-reads
-- the row its predecessor committed; the job is read by the next statement, whose fresh
-- READ COMMITTED snapshot sees that job (a join here would not: lab).
SELECT job_id FROM portq_job_unique WHERE unique_hash = :hash FOR UPDATE;

-- name: unique_job
-- That job's state, and whether it was created less than :period_ms ago (1 when
-- :period_ms is NULL).
SELECT state,
       CASE WHEN CAST(:period_ms AS bigint) IS NULL
                 OR created_at > now() - CAST(:period_ms AS bigint) * interval '1 millisecond'
            THEN 1 ELSE 0 END
FROM portq_job WHERE job_id = :job_id;

-- name: unique_point
UPDATE portq_job_unique SET job_id = :job_id WHERE unique_hash = :hash;

-- name: set_paused
-- Pause (:paused = 1) or resume (0) a queue; the row is made on first use.
INSERT INTO portq_queue (queue, paused, updated_at)
VALUES (:queue, CAST(:paused AS integer) = 1, now())
ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at;

-- name: paused_queues
SELECT queue FROM portq_queue WHERE paused ORDER BY queue;

-- name: queue_limits
-- Every queue with a portq_queue row (portq stats): paused, running limit, rate limit,
-- fair (migration 13).
SELECT queue, CASE WHEN paused THEN 1 ELSE 0 END, concurrency_limit, rate_limit,
       rate_period_ms, CASE WHEN fair THEN 1 ELSE 0 END
FROM portq_queue WHERE :queue = '*' OR queue = :queue;

-- name: queue_control
-- The queue's limits, locked for the claim's transaction: claimers of a limited queue take
-- turns counting its running jobs and reading its rate log. No row: no limit (and no lock).
SELECT concurrency_limit, rate_limit, rate_period_ms, rate_log,
       CASE WHEN fair THEN 1 ELSE 0 END, fair_after
FROM portq_queue WHERE queue = :queue FOR UPDATE;

-- name: running_count
SELECT COUNT(*) FROM portq_job WHERE queue = :queue AND state = 'running';

-- name: set_concurrency_limit
-- At most :max_running running jobs of the queue (NULL: no limit); the row is made on
-- first use.
INSERT INTO portq_queue (queue, concurrency_limit, updated_at)
VALUES (:queue, CAST(:max_running AS integer), now())
ON CONFLICT (queue) DO UPDATE SET concurrency_limit = EXCLUDED.concurrency_limit,
                                  updated_at = EXCLUDED.updated_at;

-- name: set_rate_limit
-- At most :rate_limit jobs of the queue started per :period_ms (NULLs: no rate limit, and
-- the log is cleared); the row is made on first use. A changed limit keeps the log, so it
-- applies at once to the jobs started in the last period.
INSERT INTO portq_queue (queue, rate_limit, rate_period_ms, updated_at)
VALUES (:queue, CAST(:rate_limit AS integer), CAST(:period_ms AS bigint), now())
ON CONFLICT (queue) DO UPDATE SET
    rate_limit = EXCLUDED.rate_limit, rate_period_ms = EXCLUDED.rate_period_ms,
    rate_log = CASE WHEN EXCLUDED.rate_limit IS NULL THEN NULL ELSE portq_queue.rate_log END,
    updated_at = EXCLUDED.updated_at;

-- name: db_clock_ms
-- The DB clock in epoch milliseconds, read after queue_control took the row lock:
-- clock_timestamp(), not now() (the transaction's start, before the lock wait).
SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS bigint);

-- name: set_rate_log
UPDATE portq_queue SET rate_log = :rate_log WHERE queue = :queue;

-- name: ensure_queue
-- The queue's row, made if missing, so that a claim that took keyed jobs can lock it.
INSERT INTO portq_queue (queue, updated_at) VALUES (:queue, now())
ON CONFLICT (queue) DO NOTHING;

-- name: key_running_count
-- A key's running jobs, read after the queue row's lock (READ COMMITTED: a fresh snapshot
-- with every claim committed before the lock, plus this transaction's own rows).
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
-- nothing runs), so that a worker's reaper runs about when it is due rather than on a
-- fixed tick. min() reads the first entry of portq_job_lease_idx (running rows only).
SELECT CAST(EXTRACT(EPOCH FROM (min(lease_until) - now())) * 1000 AS bigint)
FROM portq_job WHERE state = 'running';

-- name: snooze
-- A handler raised portq.Snooze: back to ready after :delay_ms without spending the attempt
-- (max_attempts + 1), at most :max_snoozes times per job (then nothing changes and the
-- worker records the attempt as failed instead); fenced like every owner's write.
UPDATE portq_job
SET state = 'ready', run_at = now() + :delay_ms * interval '1 millisecond',
    max_attempts = max_attempts + 1, snoozes = snoozes + 1, worker_id = NULL,
    lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > now() AND snoozes < :max_snoozes;

-- Progress (migration 11): the running job's last report, fenced like every write of its
-- owner (job, generation, worker, running, lease not expired); rowcount 1 = written.
-- name: set_progress
UPDATE portq_job
SET progress = CAST(:progress AS double precision), progress_note = :note,
    progress_at = statement_timestamp()
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > statement_timestamp();

-- name: worker_activity
-- The dashboard's Workers page: each live worker's row expiry and the running jobs the job
-- table says it holds (the partial index portq_job_lease_idx holds only running rows).
SELECT w.worker_id, w.expires_at, now(),
       (SELECT count(*) FROM portq_job j
        WHERE j.state = 'running' AND j.lease_until IS NOT NULL AND j.worker_id = w.worker_id)
FROM portq_worker w
WHERE w.expires_at > now();

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

-- name: server_identity
-- The cluster's system identifier (a standby made by pg_basebackup shares its primary's)
-- and the timeline this server writes (a primary: its current WAL file's; a standby: the
-- timeline of its last restartpoint). A promotion moves to a new timeline at once; the
-- checkpoint record may lag, so a primary reads it from pg_current_wal_lsn().
-- pg_backend_pid() differs from the process id the connection's start-up reported
-- where a connection pooler (PgBouncer) stands between portq and the server.
SELECT system_identifier::text,
       CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int
       END,
       pg_backend_pid()
FROM pg_control_system();

-- name: backend_pid
-- The server process running this statement (pooler detection where server_identity's
-- functions are refused).
SELECT pg_backend_pid();

-- ---- throughput and latency statistics (Queue.job_stats; portq stats; the dashboard) ----
-- Both read only the jobs that finished within the window, walking portq_job_finished_idx
-- over that range (finished_at > now() - window): the cost follows the rows in the window,
-- never the table (EXPLAIN in docs/engines.md, "Job statistics").

-- name: stats_series
-- Jobs finished per bucket of :bucket_s seconds over the last :window_s seconds, per queue
-- and state (bucket 0 the current one).
SELECT queue, state, floor(extract(epoch FROM now() - finished_at) / :bucket_s)::integer,
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at > now() - :window_s * interval '1 second'
GROUP BY 1, 2, 3;

-- name: stats_latency
-- Wait (created -> first start) and run (latest start -> finish) time of the succeeded and
-- dead jobs of the window, as counts per queue and pair of log buckets: bucket b holds
-- durations from 2^(b/4) ms (durations under 1 ms fall in bucket 0); NULL when the job has
-- no start time. The index's own state filter is kept so that the partial index applies.
SELECT queue,
       CASE WHEN first_started_at IS NOT NULL THEN floor(4 * ln(greatest(
           extract(epoch FROM first_started_at - created_at)::float8 * 1000, 1))
           / ln(2::float8))::integer END,
       CASE WHEN started_at IS NOT NULL THEN floor(4 * ln(greatest(
           extract(epoch FROM finished_at - started_at)::float8 * 1000, 1))
           / ln(2::float8))::integer END,
       count(*)
FROM portq_job
WHERE state IN ('succeeded', 'dead', 'cancelled') AND state <> 'cancelled'
  AND finished_at > now() - :window_s * interval '1 second'
GROUP BY 1, 2, 3;

-- ---- job dependencies (migration 12; SqlBackend's dependency block) ----------------------
-- Enqueue: lock each dependency's row (a completion of it waits for this transaction, and
-- this one reads its state as committed after any completion it waited for), flag it,
-- then record the edge; the new job waits on the dependencies not yet finished.
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

-- A dependency that ended (its row held by this transaction): count its unresolved edges
-- off the waiting dependents (:every = 1: every one, after a success; 0: those that run
-- anyway, after it ended dead or cancelled), cancel the rest, mark the edges resolved.
-- Dependents made ready are announced as complete_many announces them.
-- name: dep_release
WITH released AS (
    UPDATE portq_job
    SET state = CASE WHEN deps_left = 1 THEN 'ready' ELSE state END, deps_left = deps_left - 1
    WHERE state = 'waiting' AND (:every = 1 OR dep_failure = 1)
      AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0)
    RETURNING queue, state
)
SELECT count(pg_notify(CASE WHEN octet_length('portq_' || queue) <= 63 THEN 'portq_' || queue
                            ELSE 'portq_' || left(encode(sha256(convert_to(queue, 'UTF8')), 'hex'), 40) END,
                       ''))
FROM (SELECT DISTINCT queue FROM released WHERE state = 'ready') AS q;

-- name: dep_cancel_ids
SELECT job_id, has_dependents FROM portq_job
WHERE state = 'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- name: dep_cancel
UPDATE portq_job
SET state = 'cancelled', deps_left = 0, finished_at = now(), last_error = :error
WHERE state = 'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- A new job whose dependency already ended dead or cancelled (and that does not run anyway)
-- name: dep_cancel_job
UPDATE portq_job SET state = 'cancelled', finished_at = now(), last_error = :error
WHERE job_id = :job_id AND state = 'ready';

-- name: dep_resolve
UPDATE portq_job_dep SET resolved = 1 WHERE depends_on = :job_id AND resolved = 0;

-- name: dep_unflag
UPDATE portq_job SET has_dependents = 0 WHERE job_id = :job_id;

-- Jobs this transaction ended dead or cancelled that are still someone's unresolved
-- dependency (a near-empty partial index): what fail, reap, release and cancel resolve.
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
  AND j.last_error IN ('cancelled: its dependency, job ' || d.depends_on || ', ended dead',
                       'cancelled: its dependency, job ' || d.depends_on || ', ended cancelled')
ORDER BY j.job_id
FOR UPDATE OF j;

-- A revived dependent's edges to its unfinished dependencies count again.
-- name: dep_reopen
UPDATE portq_job_dep SET resolved = 0 WHERE job_id = :job_id AND depends_on IN (:dep_ids);

-- name: dep_revive
UPDATE portq_job
SET state = 'waiting', deps_left = :deps_left, finished_at = NULL, last_error = NULL
WHERE job_id = :job_id AND state = 'cancelled';

-- name: dependency_results
SELECT d.depends_on, r.result::text
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
VALUES (:queue, CAST(:fair AS integer) = 1, now())
ON CONFLICT (queue) DO UPDATE SET fair = EXCLUDED.fair, fair_after = NULL,
                                  updated_at = EXCLUDED.updated_at;

-- name: set_fair_after
-- The key a fair claim served last (NULL: the unkeyed jobs' turn), under the row's lock.
UPDATE portq_queue SET fair_after = :after WHERE queue = :queue;

-- name: fair_first_key
-- The smallest key with a ready job (portq_job_fair_idx: one seek; NULL keys sort last).
-- Every fair statement states job_id > 0, the index's predicate (schema.sql, migration 13).
SELECT concurrency_key FROM portq_job
WHERE queue = :queue AND state = 'ready' AND job_id > 0 AND concurrency_key IS NOT NULL
ORDER BY concurrency_key
LIMIT 1;

-- name: fair_next_key
-- The next key after :after with a ready job (one seek on portq_job_fair_idx).
SELECT concurrency_key FROM portq_job
WHERE queue = :queue AND state = 'ready' AND job_id > 0 AND concurrency_key > :after
ORDER BY concurrency_key
LIMIT 1;

-- name: claim_key
-- The claim of one key's jobs: `claim` with the key fixed, walking portq_job_fair_idx
-- (queue, concurrency_key, priority DESC, run_at, job_id) in order.
WITH c AS MATERIALIZED (
    SELECT job_id FROM portq_job
    WHERE queue = :queue AND concurrency_key = :concurrency_key AND state = 'ready'
      AND job_id > 0 AND run_at <= now() AND attempts < max_attempts
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused)
      AND (SELECT count(*) FROM portq_job AS r
           WHERE r.queue = :queue AND r.concurrency_key = :concurrency_key
             AND r.state = 'running') < concurrency_limit
    ORDER BY concurrency_key, priority DESC, run_at, job_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE portq_job AS j
SET state = 'running', attempts = j.attempts + 1, worker_id = :worker_id,
    lease_until = now() + :lease_ms * interval '1 millisecond',
    started_at = now(), first_started_at = COALESCE(j.first_started_at, now())
FROM c
WHERE j.job_id = c.job_id
RETURNING j.job_id, j.queue, j.payload::text, j.priority, j.attempts, j.max_attempts,
          j.job_key, j.lease_until, j.concurrency_key, j.concurrency_limit, j.timeout_ms, j.run_at,
          j.meta::text AS meta;

-- name: claim_unkeyed
-- The claim of the queue's unkeyed jobs (their turn in a round): `claim` with
-- concurrency_key IS NULL, walking portq_job_fair_idx's NULL-key entries in order.
-- The ORDER BY names the key (fixed here) first, as the index does: the walk then needs
-- no sort in any plan (PostgreSQL's generic plan sorted every unkeyed ready row without it).
WITH c AS MATERIALIZED (
    SELECT job_id FROM portq_job
    WHERE queue = :queue AND concurrency_key IS NULL AND state = 'ready'
      AND job_id > 0 AND run_at <= now() AND attempts < max_attempts
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused)
    ORDER BY concurrency_key, priority DESC, run_at, job_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE portq_job AS j
SET state = 'running', attempts = j.attempts + 1, worker_id = :worker_id,
    lease_until = now() + :lease_ms * interval '1 millisecond',
    started_at = now(), first_started_at = COALESCE(j.first_started_at, now())
FROM c
WHERE j.job_id = c.job_id
RETURNING j.job_id, j.queue, j.payload::text, j.priority, j.attempts, j.max_attempts,
          j.job_key, j.lease_until, j.concurrency_key, j.concurrency_limit, j.timeout_ms, j.run_at,
          j.meta::text AS meta;
