-- Named statements for Oracle Database 19c+ (python-oracledb, :name binds). Oracle rejects
-- a trailing ';' on a SQL statement sent by a driver, so none of these has one.
--
-- "now" is SYS_EXTRACT_UTC(SYSTIMESTAMP); durations arrive in milliseconds:
--   SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:ms / 1000, 'SECOND')
--
-- FOR UPDATE cannot be combined with FETCH FIRST or a ROWNUM-limited view (ORA-02014),
-- and a ROWNUM filter would be applied before SKIP LOCKED skips anything. So the *_lock
-- queries have no row limit: OracleBackend opens them with prefetchrows = arraysize (at
-- most 1000), fetches n rows (SKIP LOCKED locks a row as it is fetched) and closes the
-- cursor, then runs the matching update/delete on those ids in the same transaction, with
-- :ids lists padded to 1, 10, 100 or 1000 ids (four statement texts, not one per length).
-- Their WHERE and ORDER BY repeat the CASE expressions of the function-based indexes
-- (schema.sql), so that the locking read walks an index in order.

-- name: create_version_table
CREATE TABLE portq_schema_version (
    version    NUMBER(10)   CONSTRAINT portq_schema_version_pk PRIMARY KEY,
    applied_at TIMESTAMP(6) NOT NULL
)

-- name: schema_version
SELECT MAX(version) FROM portq_schema_version

-- Every applied migration: migrate() applies each version not listed, so that a
-- migration numbered below the newest applied one (merged later) still runs.
-- name: applied_versions
SELECT version FROM portq_schema_version

-- name: record_version
INSERT INTO portq_schema_version (version, applied_at)
VALUES (:version, SYS_EXTRACT_UTC(SYSTIMESTAMP))

-- A taken key raises ORA-00001, which rolls back only this statement: OracleBackend
-- catches it and looks the key up, and the caller's transaction goes on.
-- name: insert_job
INSERT INTO portq_job (queue, payload, priority, run_at, max_attempts, job_key,
                       concurrency_key, concurrency_limit, timeout_ms, meta)
VALUES (:queue, :payload, :priority,
        COALESCE(CAST(:run_at AS TIMESTAMP(6)),
                 SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:delay_ms / 1000, 'SECOND')),
        :max_attempts, :key, :concurrency_key, :concurrency_limit, :timeout_ms, :meta)
RETURNING job_id INTO :job_id

-- name: job_id_by_key
SELECT job_id FROM portq_job WHERE job_key = :key

-- name: claim_lock
SELECT job_id FROM portq_job
WHERE CASE WHEN state = 'ready' THEN queue END = :queue
  AND CASE WHEN state = 'ready' THEN run_at END <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
  AND state = 'ready' AND attempts < max_attempts
  -- a paused queue claims nothing (one primary-key probe; FOR UPDATE locks no row of it)
  AND NOT EXISTS (SELECT 1 FROM portq_queue p WHERE p.queue = :queue AND p.paused = 1)
  -- per-key limits: skip a keyed job whose key has its limit of running jobs (a count on
  -- portq_job_ckey_idx; statement-level read consistency: it never waits on a claimer's
  -- uncommitted rows, which that claimer recounts in SqlBackend.settle_keys). The cursor
  -- has no row limit (FOR UPDATE with FETCH FIRST is ORA-02014): OracleBackend.lock_ids
  -- fetches at most :limit rows.
  AND (concurrency_key IS NULL
       OR (SELECT COUNT(*) FROM portq_job r
           WHERE CASE WHEN r.state = 'running' AND r.concurrency_key IS NOT NULL
                      THEN r.queue END = :queue
             AND CASE WHEN r.state = 'running' AND r.concurrency_key IS NOT NULL
                      THEN r.concurrency_key END = portq_job.concurrency_key)
          < concurrency_limit)
ORDER BY CASE WHEN state = 'ready' THEN priority END DESC,
         CASE WHEN state = 'ready' THEN run_at END,
         CASE WHEN state = 'ready' THEN job_id END
FOR UPDATE SKIP LOCKED

-- name: claim
UPDATE portq_job
SET state = 'running',
    attempts = attempts + 1,
    worker_id = :worker_id,
    lease_until = SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:lease_ms / 1000, 'SECOND'),
    -- when this attempt (and the first) started: migration 10
    started_at = SYS_EXTRACT_UTC(SYSTIMESTAMP),
    first_started_at = COALESCE(first_started_at, SYS_EXTRACT_UTC(SYSTIMESTAMP))
WHERE job_id IN (:ids) AND state = 'ready'

-- name: claimed
SELECT job_id, queue, payload, priority, attempts, max_attempts, job_key, lease_until,
       concurrency_key, concurrency_limit, timeout_ms, run_at, meta
FROM portq_job
WHERE job_id IN (:ids) AND state = 'running' AND worker_id = :worker_id
ORDER BY priority DESC, run_at, job_id

-- name: renew
UPDATE portq_job
SET lease_until = SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:lease_ms / 1000, 'SECOND')
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- name: complete
UPDATE portq_job
SET state = 'succeeded', worker_id = NULL, lease_until = NULL,
    finished_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- name: complete_many
-- Several completions in one statement (OracleBackend.fenced_rows). :claims is a JSON
-- array of {"job_id", "generation", "worker_id"} (bound as a CLOB) read by JSON_TABLE
-- (12.1.0.2+); each is fenced as `complete`, and the claims completed come back through
-- the RETURNING ... INTO array binds, one element per updated row.
UPDATE portq_job
SET state = 'succeeded', worker_id = NULL, lease_until = NULL,
    finished_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE (job_id, attempts, worker_id) IN (
    SELECT c.job_id, c.generation, c.worker_id
    FROM JSON_TABLE(:claims, '$[*]' COLUMNS (
        job_id NUMBER(19) PATH '$.job_id', generation NUMBER(10) PATH '$.generation',
        worker_id VARCHAR2(255 CHAR) PATH '$.worker_id')) c)
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)
RETURNING job_id, attempts, has_dependents INTO :done_ids, :done_generations, :done_flags

-- name: renew_many
-- Several renewals in one statement (the heartbeat's tick), each fenced as `renew`.
UPDATE portq_job
SET lease_until = SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:lease_ms / 1000, 'SECOND')
WHERE (job_id, attempts, worker_id) IN (
    SELECT c.job_id, c.generation, c.worker_id
    FROM JSON_TABLE(:claims, '$[*]' COLUMNS (
        job_id NUMBER(19) PATH '$.job_id', generation NUMBER(10) PATH '$.generation',
        worker_id VARCHAR2(255 CHAR) PATH '$.worker_id')) c)
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)
RETURNING job_id, attempts INTO :done_ids, :done_generations

-- name: fail
UPDATE portq_job
SET state = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN run_at
                  ELSE SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:retry_ms / 1000, 'SECOND')
             END,
    finished_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts
                       THEN SYS_EXTRACT_UTC(SYSTIMESTAMP) END,
    worker_id = NULL, lease_until = NULL, last_error = :error
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- :error is bound as a CLOB (OracleBackend.execute, CLOB_BINDS): a VARCHAR bind over 4000
-- bytes travels as LONG, which may not appear inside COALESCE (ORA-01461). An empty text
-- is an empty temporary LOB, which is not NULL; COALESCE guards a NULL all the same.
-- name: record_error
INSERT INTO portq_job_error (job_id, attempt, worker_id, error, failed_at)
VALUES (:job_id, :generation, :worker_id, COALESCE(:error, TO_CLOB('(no message)')),
        SYS_EXTRACT_UTC(SYSTIMESTAMP))

-- name: job_errors
SELECT attempt, worker_id, error, failed_at FROM portq_job_error
WHERE job_id = :job_id ORDER BY attempt

-- name: release
-- Give a claimed job back unstarted (shutdown, a stale look-ahead, a late claim). Its
-- attempt is given back (max_attempts + 1, given_back + 1) while given_back is under the
-- job's own budget (max_attempts - given_back, i.e. 2 * given_back < max_attempts), so a
-- job is never claimed without end without a handler running it; past that the give-back
-- spends the attempt, and a job whose attempts are then spent goes dead, saying why.
-- (SET expressions see the row as it was before the UPDATE.)
UPDATE portq_job
SET state = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN 'ready' ELSE 'dead' END,
    finished_at = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN NULL ELSE SYS_EXTRACT_UTC(SYSTIMESTAMP) END,
    last_error = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN last_error
                      ELSE TO_CLOB('given back unstarted ' || given_back
                                   || ' times with its attempt, then with its last one') END,
    max_attempts = max_attempts + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    given_back = given_back + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    worker_id = NULL, lease_until = NULL, run_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- name: reap_lock
SELECT job_id FROM portq_job
WHERE CASE WHEN state = 'running' THEN lease_until END <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
ORDER BY CASE WHEN state = 'running' THEN lease_until END
FOR UPDATE SKIP LOCKED

-- SET expressions see the row as it was before the UPDATE, so last_error names the
-- worker that lost the lease.
-- name: reap
UPDATE portq_job
SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at
                  ELSE SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:delay_ms / 1000, 'SECOND')
             END,
    finished_at = CASE WHEN attempts >= max_attempts THEN SYS_EXTRACT_UTC(SYSTIMESTAMP) END,
    last_error = 'lease expired (worker ' || worker_id || ', attempt ' || attempts || ')',
    worker_id = NULL, lease_until = NULL
WHERE job_id IN (:ids) AND state = 'running' AND lease_until <= SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- name: prune_lock
SELECT job_id FROM portq_job
WHERE CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN finished_at END
          < SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_ms / 1000, 'SECOND')
  AND state IN (:states) AND (:queue = '*' OR queue = :queue)
  -- never a result an unfinished dependent may still read (migration 12)
  AND NOT EXISTS (SELECT 1 FROM portq_job_dep d JOIN portq_job w ON w.job_id = d.job_id
                  WHERE d.depends_on = portq_job.job_id
                    AND w.state IN ('waiting', 'ready', 'running'))
ORDER BY CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN finished_at END
FOR UPDATE SKIP LOCKED

-- name: prune
DELETE FROM portq_job WHERE job_id IN (:ids)

-- name: retry_dead
-- The attempts it had left plus :extra (a job cancelled before it ran keeps its whole
-- budget), saturating at the largest INT instead of overflowing.
UPDATE portq_job
SET state = 'ready', finished_at = NULL,
    max_attempts = max_attempts + CASE WHEN :extra < 2147483647 - max_attempts
                                      THEN :extra ELSE 2147483647 - max_attempts END,
    run_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE job_id = :job_id AND state IN ('dead', 'cancelled')

-- name: cancel
UPDATE portq_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL,
    finished_at = SYS_EXTRACT_UTC(SYSTIMESTAMP), deps_left = 0
WHERE job_id = :job_id AND state IN ('ready', 'running', 'waiting')

-- name: stats
SELECT queue,
       SUM(CASE WHEN state = 'ready' AND run_at <= n.db_now THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'ready' AND run_at > n.db_now THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'running' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'succeeded' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'dead' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = 'cancelled' THEN 1 ELSE 0 END),
       MIN(CASE WHEN state = 'ready' AND run_at <= n.db_now THEN run_at END),
       MAX(n.db_now),
       SUM(CASE WHEN state = 'waiting' THEN 1 ELSE 0 END)
FROM portq_job
CROSS JOIN (SELECT SYS_EXTRACT_UTC(SYSTIMESTAMP) AS db_now FROM dual) n
WHERE :queue = '*' OR queue = :queue
GROUP BY queue

-- name: pending
-- Whether the queue has a job running (a burst worker's exit test; OracleBackend.pending
-- asks pending_ready for the ready half). The EXISTS stops at the first entry of the
-- function-based running index (the WHERE repeats its leading CASE expression), so its
-- cost does not grow with the table; `stats` counts every row of the queue instead.
SELECT CASE WHEN EXISTS (SELECT 1 FROM portq_job
                      WHERE CASE WHEN state = 'running' THEN queue END = :queue)
            THEN 1 ELSE 0 END
FROM dual

-- name: pending_ready
-- A ready, due job of the queue that no other session holds locked, as the claim sees one:
-- FOR UPDATE SKIP LOCKED may not stand in an EXISTS subquery (nor with FETCH FIRST:
-- ORA-02014), so OracleBackend.pending fetches at most one row of this cursor and rolls
-- back, releasing the lock it took. The WHERE repeats the ready index's CASE expressions.
SELECT job_id FROM portq_job
WHERE CASE WHEN state = 'ready' THEN queue END = :queue
  AND CASE WHEN state = 'ready' THEN run_at END <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
FOR UPDATE SKIP LOCKED

-- Listing jobs (portq jobs, the dashboard), paged by key: after_id/after_run_at are the
-- last row of the previous page (after_id = 0 on the first page). :after_run_at is bound as
-- a TIMESTAMP (OracleBackend.execute, TIMESTAMP_BINDS): python-oracledb binds a datetime
-- as DATE, whose lost fraction would repeat the previous page's last second. Filters: state, queue,
-- payload text (lower-cased LIKE pattern, '!' escapes). Three orders. (A key filter is a
-- job_id_by_key lookup instead: at most one job, by the unique index.)
-- name: jobs
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(payload) LIKE :pattern ESCAPE '!')
  AND job_id > :after_id
ORDER BY job_id
FETCH FIRST :limit ROWS ONLY

-- name: jobs_newest
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(payload) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR job_id < :after_id)
ORDER BY job_id DESC
FETCH FIRST :limit ROWS ONLY

-- name: jobs_by_run_at
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job
WHERE (:state = '*' OR state = :state) AND (:queue = '*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(payload) LIKE :pattern ESCAPE '!')
  AND (:after_id = 0 OR run_at > :after_run_at
       OR (run_at = :after_run_at AND job_id > :after_id))
ORDER BY run_at, job_id
FETCH FIRST :limit ROWS ONLY

-- name: job
SELECT job_id, queue, state, payload, priority, attempts, max_attempts, job_key, run_at,
       worker_id, lease_until, last_error, created_at, finished_at,
       progress, progress_note, progress_at,
       given_back + snoozes AS released, meta, started_at, first_started_at
FROM portq_job
WHERE job_id = :job_id

-- Bulk operator actions (portq retry/cancel --queue Q --state S): lock one bounded batch
-- of ids with a cursor (the backend fetches at most :limit), then update them.
-- name: retry_many_lock
SELECT job_id FROM portq_job
WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
ORDER BY job_id
FOR UPDATE SKIP LOCKED

-- name: retry_many
UPDATE portq_job
SET state = 'ready', max_attempts = attempts + :extra, finished_at = NULL,
    run_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE job_id IN (:ids) AND state IN (:states)

-- name: cancel_many_lock
SELECT job_id FROM portq_job
WHERE state IN (:states) AND (:queue = '*' OR queue = :queue)
ORDER BY job_id
FOR UPDATE SKIP LOCKED

-- name: cancel_many
UPDATE portq_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL,
    finished_at = SYS_EXTRACT_UTC(SYSTIMESTAMP), deps_left = 0
WHERE job_id IN (:ids) AND state IN (:states)

-- What `portq conformance` prints first: server version (PRODUCT_COMPONENT_VERSION is
-- readable by every user); Oracle has no view of a session's isolation level, so NULL.
-- name: server_info
SELECT version, NULL FROM product_component_version
WHERE product LIKE 'Oracle%'
FETCH FIRST 1 ROWS ONLY

-- Does a table of this prefix exist (before `portq conformance` drops it)?
-- name: table_exists
SELECT 1 FROM user_tables WHERE table_name = UPPER(:name)

-- `portq stats` over the last :window_ms: failed attempts recorded (portq_job_error) and
-- jobs that succeeded, per queue (retry_rate = failed / (failed + succeeded)).
-- name: attempt_stats
SELECT queue, SUM(failed), SUM(succeeded)
FROM (
    SELECT j.queue AS queue, 1 AS failed, 0 AS succeeded
    FROM portq_job_error e JOIN portq_job j ON j.job_id = e.job_id
    WHERE e.failed_at > SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:window_ms / 1000, 'SECOND')
      AND (:queue = '*' OR j.queue = :queue)
    UNION ALL
    SELECT queue, 0, 1
    FROM portq_job
    WHERE state = 'succeeded' AND finished_at > SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:window_ms / 1000, 'SECOND')
      AND (:queue = '*' OR queue = :queue)
) a
GROUP BY queue

-- Jobs finished per minute over the last :minutes minutes (the dashboard's charts); walks
-- the finished index.
-- name: finished_per_minute
SELECT queue, state,
       FLOOR((CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS DATE) - CAST(finished_at AS DATE)) * 1440),
       COUNT(*)
FROM portq_job
WHERE CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN finished_at END
      > SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:minutes, 'MINUTE')
GROUP BY queue, state,
       FLOOR((CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS DATE) - CAST(finished_at AS DATE)) * 1440)

-- name: delete_finished
DELETE FROM portq_job
WHERE job_id = :job_id AND state IN ('succeeded', 'dead', 'cancelled')

-- The worker registry (migration 3). A heartbeat first deletes the rows of workers whose
-- heartbeats stopped, then renews its own row (inserting it when it is missing).
-- name: expire_workers
DELETE FROM portq_worker WHERE expires_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- name: register_worker
INSERT INTO portq_worker (worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules,
                          started_at, heartbeat_at, expires_at)
VALUES (:worker_id, :host, :pid, :queues, :concurrency, :jobs_in_hand, :schedules, SYS_EXTRACT_UTC(SYSTIMESTAMP),
        SYS_EXTRACT_UTC(SYSTIMESTAMP), SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:ttl_ms / 1000, 'SECOND'))

-- name: worker_heartbeat
UPDATE portq_worker
SET jobs_in_hand = :jobs_in_hand, schedules = :schedules, heartbeat_at = SYS_EXTRACT_UTC(SYSTIMESTAMP),
    expires_at = SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:ttl_ms / 1000, 'SECOND')
WHERE worker_id = :worker_id

-- name: deregister_worker
DELETE FROM portq_worker WHERE worker_id = :worker_id

-- name: workers
SELECT worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules, started_at,
       heartbeat_at, SYS_EXTRACT_UTC(SYSTIMESTAMP)
FROM portq_worker
WHERE expires_at > SYS_EXTRACT_UTC(SYSTIMESTAMP)
ORDER BY started_at, worker_id

-- Results (migration 5). store_result runs lock_owned_job (which locks the job row, so no
-- reap or claim can take the job meanwhile), then delete_result and insert_result, in one
-- transaction: the result is written only while the claim still owns the job.
-- OracleBackend binds :result as a CLOB (a str over 4000 bytes would be sent as LONG).
-- name: lock_owned_job
SELECT job_id FROM portq_job
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)
FOR UPDATE

-- name: delete_result
DELETE FROM portq_result WHERE job_id = :job_id

-- name: insert_result
INSERT INTO portq_result (job_id, generation, result) VALUES (:job_id, :generation, :result)

-- name: job_result
SELECT r.result FROM portq_result r JOIN portq_job j ON j.job_id = r.job_id
WHERE r.job_id = :job_id AND j.state = 'succeeded'

-- name: unique_ensure
-- Scoped uniqueness: make the scoped key's row exist. Two sessions inserting the same new
-- key at once: the second waits on the first's uncommitted entry, then gets ORA-00001 if
-- the first committed; ORA-00001 rolls back this statement only, and
-- SqlBackend.insert_scoped runs it once more (the row exists then).
MERGE INTO portq_job_unique u
USING (SELECT :hash AS unique_hash FROM dual) s
ON (u.unique_hash = s.unique_hash)
WHEN NOT MATCHED THEN INSERT (unique_hash, job_id) VALUES (s.unique_hash, NULL)

-- name: unique_lock
-- Lock the scoped key's row: its latest job id (NULL when none or pruned).
SELECT job_id FROM portq_job_unique WHERE unique_hash = :hash FOR UPDATE

-- name: unique_job
-- That job's state, and whether it was created less than :period_ms ago (1 when
-- :period_ms is NULL); read committed: this statement's snapshot follows the lock.
SELECT state,
       CASE WHEN :period_ms IS NULL
                 OR created_at > SYS_EXTRACT_UTC(SYSTIMESTAMP)
                                 - NUMTODSINTERVAL(:period_ms / 1000, 'SECOND')
            THEN 1 ELSE 0 END
FROM portq_job WHERE job_id = :job_id

-- name: unique_point
UPDATE portq_job_unique SET job_id = :job_id WHERE unique_hash = :hash

-- name: set_paused
-- Pause (:paused = 1) or resume (0) a queue; the row is made on first use (a concurrent
-- first use may raise ORA-00001, as for unique_ensure: the operator runs it again).
MERGE INTO portq_queue t
USING (SELECT :queue AS queue FROM dual) s ON (t.queue = s.queue)
WHEN MATCHED THEN UPDATE SET paused = :paused, updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHEN NOT MATCHED THEN INSERT (queue, paused, updated_at)
    VALUES (s.queue, :paused, SYS_EXTRACT_UTC(SYSTIMESTAMP))

-- name: paused_queues
SELECT queue FROM portq_queue WHERE paused = 1 ORDER BY queue

-- name: queue_limits
-- Every queue with a portq_queue row (portq stats): paused, running limit, rate limit,
-- fair (migration 13).
SELECT queue, paused, concurrency_limit, rate_limit, rate_period_ms, fair
FROM portq_queue WHERE :queue = '*' OR queue = :queue

-- name: queue_control
-- The queue's limits, locked for the claim's transaction: claimers of a limited queue take
-- turns counting its running jobs and reading its rate log.
SELECT concurrency_limit, rate_limit, rate_period_ms, rate_log, fair, fair_after
FROM portq_queue WHERE queue = :queue FOR UPDATE

-- name: running_count
-- The CASE expression matches portq_job_running_idx (a function-based index).
SELECT COUNT(*) FROM portq_job WHERE CASE WHEN state = 'running' THEN queue END = :queue

-- name: set_concurrency_limit
MERGE INTO portq_queue t
USING (SELECT :queue AS queue FROM dual) s ON (t.queue = s.queue)
WHEN MATCHED THEN UPDATE SET concurrency_limit = :max_running,
                             updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHEN NOT MATCHED THEN INSERT (queue, concurrency_limit, updated_at)
    VALUES (s.queue, :max_running, SYS_EXTRACT_UTC(SYSTIMESTAMP))

-- name: set_rate_limit
-- At most :rate_limit jobs started per :period_ms (NULLs: none, and the log is cleared).
MERGE INTO portq_queue t
USING (SELECT :queue AS queue FROM dual) s ON (t.queue = s.queue)
WHEN MATCHED THEN UPDATE SET
    rate_log = CASE WHEN :rate_limit IS NULL THEN NULL ELSE t.rate_log END,
    rate_limit = :rate_limit, rate_period_ms = :period_ms,
    updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHEN NOT MATCHED THEN INSERT (queue, rate_limit, rate_period_ms, updated_at)
    VALUES (s.queue, :rate_limit, :period_ms, SYS_EXTRACT_UTC(SYSTIMESTAMP))

-- name: db_clock_ms
-- The DB clock in epoch milliseconds (SYSTIMESTAMP is read when this statement runs,
-- after queue_control took the row's lock), computed exactly from the interval since the
-- epoch (TIMESTAMP - TIMESTAMP is an INTERVAL DAY TO SECOND): no CAST to DATE, which may
-- round the fraction to the nearest second instead of cutting it.
SELECT EXTRACT(DAY FROM d) * 86400000 + EXTRACT(HOUR FROM d) * 3600000
       + EXTRACT(MINUTE FROM d) * 60000 + TRUNC(EXTRACT(SECOND FROM d) * 1000)
FROM (SELECT SYS_EXTRACT_UTC(SYSTIMESTAMP) - TIMESTAMP '1970-01-01 00:00:00' AS d FROM dual)

-- name: set_rate_log
UPDATE portq_queue SET rate_log = :rate_log WHERE queue = :queue

-- name: ensure_queue
-- The queue's row, made if missing (a concurrent first insert: ORA-00001, which
-- rolls back only this statement; the row then exists).
MERGE INTO portq_queue t
USING (SELECT :queue AS queue FROM dual) s ON (t.queue = s.queue)
WHEN NOT MATCHED THEN INSERT (queue, updated_at)
    VALUES (s.queue, SYS_EXTRACT_UTC(SYSTIMESTAMP))

-- name: key_running_count
-- A key's running jobs, read after the queue row's lock: statement-level read consistency
-- (every claim committed before this statement, plus this transaction's own rows). The
-- CASEs match portq_job_ckey_idx.
SELECT COUNT(*) FROM portq_job
WHERE CASE WHEN state = 'running' AND concurrency_key IS NOT NULL THEN queue END = :queue
  AND CASE WHEN state = 'running' AND concurrency_key IS NOT NULL
           THEN concurrency_key END = :concurrency_key

-- name: unclaim
-- Put back a job this claim took beyond its key's limit: ready again, attempt undone.
UPDATE portq_job
SET state = 'ready', attempts = attempts - 1, worker_id = NULL, lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running'

-- name: next_lease_expiry_ms
-- Milliseconds until the earliest running lease expires (negative: already expired; NULL:
-- nothing runs): TIMESTAMP - TIMESTAMP is an INTERVAL DAY TO SECOND, whose fields EXTRACT
-- reads exactly (each negative for a past lease). The CASE is portq_job_lease_idx's
-- expression, so MIN() reads that function-based index.
SELECT EXTRACT(DAY FROM d) * 86400000 + EXTRACT(HOUR FROM d) * 3600000
       + EXTRACT(MINUTE FROM d) * 60000 + ROUND(EXTRACT(SECOND FROM d) * 1000)
FROM (SELECT MIN(CASE WHEN state = 'running' THEN lease_until END)
             - SYS_EXTRACT_UTC(SYSTIMESTAMP) AS d
      FROM portq_job)

-- Migrations: DDL waits up to this many seconds for the table locks held by running
-- workers' transactions, instead of failing at once with ORA-00054 (the default 0);
-- OracleBackend.migration_lock sets it for the migration and resets it after.
-- name: ddl_lock_wait
ALTER SESSION SET DDL_LOCK_TIMEOUT = 30

-- name: ddl_lock_nowait
ALTER SESSION SET DDL_LOCK_TIMEOUT = 0

-- name: snooze
-- A handler raised portq.Snooze: back to ready after :delay_ms without spending the attempt
-- (max_attempts + 1), at most :max_snoozes times per job (then nothing changes and the
-- worker records the attempt as failed instead); fenced like every owner's write.
UPDATE portq_job
SET state = 'ready',
    run_at = SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:delay_ms / 1000, 'SECOND'),
    max_attempts = max_attempts + 1, snoozes = snoozes + 1, worker_id = NULL,
    lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)
  AND snoozes < :max_snoozes

-- Progress (migration 11): the running job's last report, fenced like every write of its
-- owner (job, generation, worker, running, lease not expired); rowcount 1 = written.
-- name: set_progress
UPDATE portq_job
SET progress = CAST(:progress AS BINARY_DOUBLE), progress_note = :note,
    progress_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND state = 'running' AND lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- name: worker_activity
-- The dashboard's Workers page: each live worker's row expiry and the running jobs the job
-- table says it holds (the CASE matches the function-based index portq_job_lease_idx).
SELECT w.worker_id, w.expires_at, SYS_EXTRACT_UTC(SYSTIMESTAMP),
       (SELECT COUNT(*) FROM portq_job j
        WHERE CASE WHEN j.state = 'running' THEN j.lease_until END IS NOT NULL
          AND j.worker_id = w.worker_id)
FROM portq_worker w
WHERE w.expires_at > SYS_EXTRACT_UTC(SYSTIMESTAMP)

-- name: job_concurrency
-- A job's per-key limit (enqueue(concurrency_key=, concurrency_limit=)), for its page.
SELECT concurrency_key, concurrency_limit FROM portq_job WHERE job_id = :job_id

-- name: queue_key_limits
-- The queue page's per-key limits in use: the keys of the queue's running jobs, each with
-- its limit and running count, busiest first (the CASEs match portq_job_ckey_idx).
SELECT CASE WHEN state = 'running' AND concurrency_key IS NOT NULL
            THEN concurrency_key END AS ckey,
       MAX(concurrency_limit), COUNT(*)
FROM portq_job
WHERE CASE WHEN state = 'running' AND concurrency_key IS NOT NULL THEN queue END = :queue
GROUP BY CASE WHEN state = 'running' AND concurrency_key IS NOT NULL
              THEN concurrency_key END
ORDER BY COUNT(*) DESC, ckey
FETCH FIRST :limit ROWS ONLY

-- ---- throughput and latency statistics (Queue.job_stats; portq stats; the dashboard) ----
-- Both read only the jobs that finished within the window, walking the function-based
-- portq_job_finished_idx over that range (its own CASE expression in WHERE): the cost
-- follows the rows in the window, never the table.

-- name: stats_series
-- Jobs finished per bucket of :bucket_s seconds over the last :window_s seconds, per queue
-- and state (bucket 0 the current one).
SELECT queue, state, ago, COUNT(*)
FROM (SELECT queue, state,
             FLOOR((CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS DATE) - CAST(finished_at AS DATE))
                   * 86400 / :bucket_s) AS ago
      FROM portq_job
      WHERE CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN finished_at END
            > SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:window_s, 'SECOND')) t
GROUP BY queue, state, ago

-- name: stats_latency
-- Wait (created -> first start) and run (latest start -> finish) time of the succeeded and
-- dead jobs of the window, as counts per queue and pair of log buckets: bucket b holds
-- durations from 2^(b/4) ms (durations under 1 ms fall in bucket 0); NULL when the job has
-- no start time. A TIMESTAMP difference is an INTERVAL DAY TO SECOND: its fields add up
-- to milliseconds.
SELECT queue, wait_b, run_b, COUNT(*)
FROM (SELECT queue,
             FLOOR(4 * LOG(2, GREATEST(wait_ms, 1))) AS wait_b,
             FLOOR(4 * LOG(2, GREATEST(run_ms, 1))) AS run_b
      FROM (SELECT queue,
                   EXTRACT(DAY FROM first_started_at - created_at) * 86400000
                   + EXTRACT(HOUR FROM first_started_at - created_at) * 3600000
                   + EXTRACT(MINUTE FROM first_started_at - created_at) * 60000
                   + EXTRACT(SECOND FROM first_started_at - created_at) * 1000 AS wait_ms,
                   EXTRACT(DAY FROM finished_at - started_at) * 86400000
                   + EXTRACT(HOUR FROM finished_at - started_at) * 3600000
                   + EXTRACT(MINUTE FROM finished_at - started_at) * 60000
                   + EXTRACT(SECOND FROM finished_at - started_at) * 1000 AS run_ms
            FROM portq_job
            WHERE CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN finished_at END
                  > SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:window_s, 'SECOND')
              AND state <> 'cancelled') m) t
GROUP BY queue, wait_b, run_b

-- ---- job dependencies (migration 12; portq/backends/dependencies.py) -------------------
-- SELECT ... FOR UPDATE returns the row as last committed (after waiting for its lock).
-- name: dep_lock
SELECT job_id, state FROM portq_job
WHERE job_id IN (:dep_ids)
ORDER BY job_id
FOR UPDATE

-- name: dep_flag
UPDATE portq_job SET has_dependents = 1
WHERE job_id IN (:dep_ids) AND has_dependents = 0 AND state IN ('ready', 'running', 'waiting')

-- name: dep_insert
INSERT INTO portq_job_dep (job_id, depends_on, resolved)
SELECT :job_id, job_id, CASE WHEN :count_unfinished = 1 AND state IN ('ready', 'running', 'waiting') THEN 0 ELSE 1 END
FROM portq_job WHERE job_id IN (:dep_ids)

-- name: dep_wait
UPDATE portq_job SET state = 'waiting', deps_left = :deps_left, dep_failure = :dep_failure
WHERE job_id = :job_id AND state = 'ready'

-- name: dep_release
UPDATE portq_job
SET state = CASE WHEN deps_left = 1 THEN 'ready' ELSE state END, deps_left = deps_left - 1
WHERE state = 'waiting' AND (:every = 1 OR dep_failure = 1)
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0)

-- name: dep_cancel_ids
SELECT job_id, has_dependents FROM portq_job
WHERE state = 'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0)
FOR UPDATE

-- name: dep_cancel
UPDATE portq_job
SET state = 'cancelled', deps_left = 0, finished_at = SYS_EXTRACT_UTC(SYSTIMESTAMP), last_error = :error
WHERE state = 'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0)

-- name: dep_cancel_job
UPDATE portq_job SET state = 'cancelled', finished_at = SYS_EXTRACT_UTC(SYSTIMESTAMP), last_error = :error
WHERE job_id = :job_id AND state = 'ready'

-- name: dep_resolve
UPDATE portq_job_dep SET resolved = 1 WHERE depends_on = :job_id AND resolved = 0

-- name: dep_unflag
UPDATE portq_job SET has_dependents = 0 WHERE job_id = :job_id

-- The function-based index's expression (schema.sql, migration 12), repeated to use it.
-- name: dep_unsettled
SELECT job_id, state FROM portq_job
WHERE CASE WHEN has_dependents = 1 AND state IN ('dead', 'cancelled') THEN job_id END
      IS NOT NULL
FOR UPDATE

-- Retrying a dependency (retry_dead, retry_many; dependencies.revive) revives the
-- dependents its failure cancelled: those cancelled with the reason naming it
-- (dependencies.failure_reason's text), locked; then each is checked and reopened.
-- name: dep_revive_ids
SELECT j.job_id FROM portq_job_dep d
JOIN portq_job j ON j.job_id = d.job_id
WHERE d.depends_on IN (:dep_ids) AND j.state = 'cancelled'
  AND (DBMS_LOB.COMPARE(j.last_error, TO_CLOB('cancelled: its dependency, job ' || d.depends_on
                                              || ', ended dead')) = 0
       OR DBMS_LOB.COMPARE(j.last_error, TO_CLOB('cancelled: its dependency, job ' || d.depends_on
                                                 || ', ended cancelled')) = 0)
ORDER BY j.job_id
FOR UPDATE OF j.state

-- A revived dependent's edges to its unfinished dependencies count again.
-- name: dep_reopen
UPDATE portq_job_dep SET resolved = 0 WHERE job_id = :job_id AND depends_on IN (:dep_ids)

-- name: dep_revive
UPDATE portq_job
SET state = 'waiting', deps_left = :deps_left, finished_at = NULL, last_error = NULL
WHERE job_id = :job_id AND state = 'cancelled'

-- name: dependency_results
SELECT d.depends_on, r.result
FROM portq_job_dep d JOIN portq_result r ON r.job_id = d.depends_on
WHERE d.job_id = :job_id
ORDER BY d.depends_on

-- name: job_dependencies
SELECT d.depends_on, j.state FROM portq_job_dep d
LEFT JOIN portq_job j ON j.job_id = d.depends_on
WHERE d.job_id = :job_id
ORDER BY d.depends_on

-- name: job_dependents
SELECT d.job_id, j.state FROM portq_job_dep d
JOIN portq_job j ON j.job_id = d.job_id
WHERE d.depends_on = :job_id
ORDER BY d.job_id

-- ---- fair sharing across keys (migration 13; SqlBackend.fair_rows) ---------------------

-- name: set_fairness
-- A queue's claims take jobs round-robin across concurrency keys (:fair = 1) or in plain
-- claim order (0); the row is made on first use, the round starts over.
MERGE INTO portq_queue t
USING (SELECT :queue AS queue FROM dual) s ON (t.queue = s.queue)
WHEN MATCHED THEN UPDATE SET fair = :fair, fair_after = NULL,
                             updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHEN NOT MATCHED THEN INSERT (queue, fair, updated_at)
    VALUES (s.queue, :fair, SYS_EXTRACT_UTC(SYSTIMESTAMP))

-- name: set_fair_after
-- The key a fair claim served last (NULL: the unkeyed jobs' turn), under the row's lock.
UPDATE portq_queue SET fair_after = :after WHERE queue = :queue

-- name: fair_first_key
-- The smallest key with a ready job (portq_job_fair_idx: one seek; the CASEs match it).
SELECT CASE WHEN state = 'ready' THEN concurrency_key END FROM portq_job
WHERE CASE WHEN state = 'ready' THEN queue END = :queue
  AND CASE WHEN state = 'ready' THEN concurrency_key END IS NOT NULL
ORDER BY CASE WHEN state = 'ready' THEN concurrency_key END
FETCH FIRST 1 ROWS ONLY

-- name: fair_next_key
-- The next key after :after with a ready job (one seek on portq_job_fair_idx; VARCHAR2
-- compares as binary under the default NLS_COMP).
SELECT CASE WHEN state = 'ready' THEN concurrency_key END FROM portq_job
WHERE CASE WHEN state = 'ready' THEN queue END = :queue
  AND CASE WHEN state = 'ready' THEN concurrency_key END > :after
ORDER BY CASE WHEN state = 'ready' THEN concurrency_key END
FETCH FIRST 1 ROWS ONLY

-- name: claim_key
-- The cursor locking one key's jobs (OracleBackend.claim_rows): `claim_lock` with the key
-- fixed, walking portq_job_fair_idx in order (the CASEs match it); then `claim` and
-- `claimed` by id.
SELECT job_id FROM portq_job
WHERE CASE WHEN state = 'ready' THEN queue END = :queue AND CASE WHEN state = 'ready' THEN concurrency_key END = :concurrency_key
  AND CASE WHEN state = 'ready' THEN run_at END <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
  AND state = 'ready' AND attempts < max_attempts
  AND NOT EXISTS (SELECT 1 FROM portq_queue p WHERE p.queue = :queue AND p.paused = 1)
  AND (SELECT COUNT(*) FROM portq_job r
       WHERE CASE WHEN r.state = 'running' AND r.concurrency_key IS NOT NULL
                  THEN r.queue END = :queue
         AND CASE WHEN r.state = 'running' AND r.concurrency_key IS NOT NULL
                  THEN r.concurrency_key END = :concurrency_key)
      < concurrency_limit
ORDER BY CASE WHEN state = 'ready' THEN concurrency_key END,
         CASE WHEN state = 'ready' THEN priority END DESC,
         CASE WHEN state = 'ready' THEN run_at END,
         CASE WHEN state = 'ready' THEN job_id END
FOR UPDATE SKIP LOCKED

-- name: claim_unkeyed
-- The cursor locking the queue's unkeyed jobs (their turn in a round): `claim_lock` with
-- no key, walking portq_job_fair_idx's NULL-key entries in order; then `claim`, `claimed`.
SELECT job_id FROM portq_job
WHERE CASE WHEN state = 'ready' THEN queue END = :queue AND CASE WHEN state = 'ready' THEN concurrency_key END IS NULL
  AND CASE WHEN state = 'ready' THEN run_at END <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
  AND state = 'ready' AND attempts < max_attempts
  AND NOT EXISTS (SELECT 1 FROM portq_queue p WHERE p.queue = :queue AND p.paused = 1)
ORDER BY CASE WHEN state = 'ready' THEN concurrency_key END,
         CASE WHEN state = 'ready' THEN priority END DESC,
         CASE WHEN state = 'ready' THEN run_at END,
         CASE WHEN state = 'ready' THEN job_id END
FOR UPDATE SKIP LOCKED
