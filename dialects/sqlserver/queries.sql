-- Named statements for SQL Server (pyodbc, qmark: every :name becomes one ?).
--
-- Durations arrive in milliseconds and are added to the database clock. DATEADD takes an
-- int, and 2^31 ms is under 25 days, so every duration is split into whole days and the
-- remaining milliseconds:
--   DATEADD(MILLISECOND, CAST(:ms % 86400000 AS INT),
--           DATEADD(DAY, CAST(:ms / 86400000 AS INT), SYSUTCDATETIME()))
--
-- Claims, reaps and prunes read with WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK):
-- UPDLOCK holds an update lock on each row read until the transaction ends, READPAST skips
-- rows other transactions hold locked, ROWLOCK keeps the locks at row level (READPAST skips
-- row locks, not page locks), and READCOMMITTEDLOCK makes the read a locking read even when
-- the database has READ_COMMITTED_SNAPSHOT ON, where READPAST is otherwise refused.
-- Literals compared with state are N'...' so that they match the filtered indexes.
--
-- job_key is VARBINARY (schema.sql, migration 2): a key is bound as text and compared as
-- its UTF-16LE bytes, CAST(CAST(:key AS NVARCHAR(510)) AS VARBINARY(1020)) (the inner CAST
-- makes the bytes UTF-16 whatever type a driver binds the text as), and read back with
-- CAST(job_key AS NVARCHAR(510)).
--
-- A bound string may arrive as VARCHAR: mssql-python binds an ASCII-only str as VARCHAR (one
-- byte per character) and any other as NVARCHAR; pyodbc binds every str as NVARCHAR. So a
-- parameter whose bytes matter is cast to its column's type first: the fenced statements
-- compare DATALENGTH(worker_id) (an NVARCHAR column: 2 bytes per code unit) with
-- DATALENGTH(CAST(:worker_id AS NVARCHAR(400))), never with DATALENGTH(:worker_id) (which is
-- half as long for an ASCII id bound as VARCHAR, and would refuse every fenced write), and
-- the CHAR(64) scoped-key hash is compared with CAST(:hash AS CHAR(64)). Where only `=`
-- meets an NVARCHAR column the parameter converts to NVARCHAR (higher type precedence) and
-- the column is never converted.
--
-- Times are bound as ISO 8601 text ('2026-12-05T01:02:03.456789', SqlServerBackend.to_db_time)
-- and read with CAST(... AS DATETIME2(6)): the microseconds then survive whatever the driver
-- does with a datetime parameter (pyodbc cuts its fraction to the precision the ODBC driver
-- reports for SQL_TYPE_TIMESTAMP; FreeTDS drops it).
--
-- Operator reads (stats, jobs, job_errors) use WITH (READPAST, READCOMMITTEDLOCK): with
-- READ_COMMITTED_SNAPSHOT OFF a plain SELECT would wait on every uncommitted enqueue (and
-- `portq stats` would hang behind an application's open transaction); READPAST skips the
-- rows other transactions hold locked (rows not yet committed, or being claimed right
-- now), and READCOMMITTEDLOCK keeps READPAST legal when READ_COMMITTED_SNAPSHOT is ON.

-- name: session_setup
SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;
SET XACT_ABORT OFF;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

-- name: create_version_table
IF OBJECT_ID(N'portq_schema_version', N'U') IS NULL
    CREATE TABLE portq_schema_version (
        version    INT          NOT NULL CONSTRAINT portq_schema_version_pk PRIMARY KEY,
        applied_at DATETIME2(6) NOT NULL
    );

-- The connection runs in ODBC manual-commit mode (IMPLICIT_TRANSACTIONS ON): EXEC does not
-- open the transaction, a SELECT from a table does. sp_getapplock owned by the transaction
-- is released by its commit or rollback. The batch ends with one result set holding the
-- lock's return code, which SqlServerBackend.migration_lock reads after draining every
-- earlier result (row counts) with nextset(): pyodbc reports results after the first only
-- through nextset(), so a batch left undrained can be cancelled while sp_getapplock waits.
-- name: migration_lock
DECLARE @portq_lock INT;
IF @@TRANCOUNT = 0
BEGIN
    SELECT @portq_lock = COUNT(*) FROM sys.objects WHERE object_id = 0;
END;
EXEC @portq_lock = sp_getapplock @Resource = N'portq_schema_version', @LockMode = 'Exclusive',
    @LockOwner = 'Transaction', @LockTimeout = 60000;
SELECT @portq_lock AS lock_result;

-- name: schema_version
SELECT MAX(version) FROM portq_schema_version;

-- Every applied migration: migrate() applies each version not listed, so that a
-- migration numbered below the newest applied one (merged later) still runs.
-- name: applied_versions
SELECT version FROM portq_schema_version;

-- name: record_version
INSERT INTO portq_schema_version (version, applied_at) VALUES (:version, SYSUTCDATETIME());

-- Inside the caller's transaction. The NOT EXISTS probe is a plain read at the caller's
-- isolation: at READ COMMITTED it takes and releases a shared lock on the one key it
-- looks up (waiting for an uncommitted insert of that key to settle), and no range lock,
-- so enqueues of other keys never wait for each other. Two inserts of a new key that race
-- past the probe meet on the unique index: the second waits for the first transaction,
-- then fails with 2627/2601, which SqlServerBackend.insert_job catches (the statement is
-- rolled back, the transaction goes on: XACT_ABORT OFF) before reading the existing id.
-- name: insert_job
INSERT INTO portq_job (queue, payload, priority, run_at, max_attempts, job_key,
                       concurrency_key, concurrency_limit, timeout_ms, meta)
OUTPUT inserted.job_id
SELECT :queue, :payload, :priority,
       COALESCE(CAST(:run_at AS DATETIME2(6)),
                DATEADD(MILLISECOND, CAST(:delay_ms % 86400000 AS INT),
                        DATEADD(DAY, CAST(:delay_ms / 86400000 AS INT), SYSUTCDATETIME()))),
       :max_attempts, CAST(CAST(:key AS NVARCHAR(510)) AS VARBINARY(1020)),
       CAST(CAST(:concurrency_key AS NVARCHAR(510)) AS VARBINARY(1020)), CAST(:concurrency_limit AS INT),
       CAST(:timeout_ms AS INT), CAST(:meta AS NVARCHAR(4000))
WHERE NOT EXISTS (
    SELECT 1 FROM portq_job
    WHERE :key IS NOT NULL AND job_key IS NOT NULL
      AND job_key = CAST(CAST(:key AS NVARCHAR(510)) AS VARBINARY(1020)));

-- name: transaction_state
SELECT XACT_STATE();

-- name: job_id_by_key
SELECT job_id FROM portq_job
WHERE job_key IS NOT NULL AND job_key = CAST(CAST(:key AS NVARCHAR(510)) AS VARBINARY(1020));

-- UPDATE TOP (n) cannot order, so the ordered TOP (n) is a CTE and the UPDATE goes
-- through it; OUTPUT returns the claimed rows in CLAIM_COLUMNS order.
-- name: claim
WITH c AS (
    SELECT TOP (:limit) job_id, queue, payload, priority, state, attempts, max_attempts,
           job_key, worker_id, lease_until, concurrency_key, concurrency_limit, timeout_ms,
           started_at, first_started_at, run_at, meta
    FROM portq_job WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE queue = :queue AND state = N'ready' AND run_at <= SYSUTCDATETIME()
      AND attempts < max_attempts
      -- a paused queue claims nothing (one primary-key probe)
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
      -- per-key limits: skip a keyed job whose key has its limit of running jobs. READPAST:
      -- never wait on another claimer's uncommitted rows (it recounts after it gets the
      -- queue row's lock: SqlBackend.settle_keys); READCOMMITTEDLOCK makes READPAST legal
      -- under READ_COMMITTED_SNAPSHOT ON.
      AND (concurrency_key IS NULL
           OR (SELECT COUNT(*) FROM portq_job AS r WITH (READCOMMITTEDLOCK, READPAST)
               WHERE r.queue = :queue AND r.concurrency_key = portq_job.concurrency_key
                 AND r.state = N'running' AND r.concurrency_key IS NOT NULL)
              < concurrency_limit)
    ORDER BY priority DESC, run_at, job_id
)
UPDATE c
SET state = N'running',
    attempts = attempts + 1,
    worker_id = :worker_id,
    lease_until = DATEADD(MILLISECOND, CAST(:lease_ms % 86400000 AS INT),
                          DATEADD(DAY, CAST(:lease_ms / 86400000 AS INT), SYSUTCDATETIME())),
    -- when this attempt (and the first) started: migration 10 (columns of the CTE above)
    started_at = SYSUTCDATETIME(),
    first_started_at = COALESCE(first_started_at, SYSUTCDATETIME())
OUTPUT inserted.job_id, inserted.queue, inserted.payload, inserted.priority, inserted.attempts,
       inserted.max_attempts, CAST(inserted.job_key AS NVARCHAR(510)) AS job_key,
       inserted.lease_until,
       CAST(inserted.concurrency_key AS NVARCHAR(510)) AS concurrency_key,
       inserted.concurrency_limit, inserted.timeout_ms, inserted.run_at, inserted.meta;

-- name: renew
UPDATE portq_job
SET lease_until = DATEADD(MILLISECOND, CAST(:lease_ms % 86400000 AS INT),
                          DATEADD(DAY, CAST(:lease_ms / 86400000 AS INT), SYSUTCDATETIME()))
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))
  AND state = N'running' AND lease_until > SYSUTCDATETIME();

-- name: complete
UPDATE portq_job
SET state = N'succeeded', worker_id = NULL, lease_until = NULL, finished_at = SYSUTCDATETIME()
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))
  AND state = N'running' AND lease_until > SYSUTCDATETIME();

-- name: complete_many
-- Several completions in one statement (SqlBackend.fenced_many). :claims is a JSON array
-- of {"job_id", "generation", "worker_id"} read by OPENJSON (compatibility level 130+);
-- each is fenced as `complete`, the job row reached by a seek on its key (FORCESEEK, so
-- no scan takes update locks on other workers' rows), and OUTPUT names the claims
-- completed, with has_dependents: SqlBackend.completed_dependencies releases those jobs'
-- dependents in the same transaction.
UPDATE j
SET state = N'succeeded', worker_id = NULL, lease_until = NULL, finished_at = SYSUTCDATETIME()
OUTPUT inserted.job_id, inserted.attempts, inserted.has_dependents
FROM OPENJSON(:claims)
     WITH (job_id BIGINT '$.job_id', generation INT '$.generation',
           worker_id NVARCHAR(400) '$.worker_id') AS c
JOIN portq_job AS j WITH (FORCESEEK, ROWLOCK)
  ON j.job_id = c.job_id AND j.attempts = c.generation
     AND j.worker_id = c.worker_id COLLATE Latin1_General_100_BIN2
     AND DATALENGTH(j.worker_id) = DATALENGTH(c.worker_id)
WHERE j.state = N'running' AND j.lease_until > SYSUTCDATETIME();

-- name: renew_many
-- Several renewals in one statement (the heartbeat's tick), each fenced as `renew`.
UPDATE j
SET lease_until = DATEADD(MILLISECOND, CAST(:lease_ms % 86400000 AS INT),
                          DATEADD(DAY, CAST(:lease_ms / 86400000 AS INT), SYSUTCDATETIME()))
OUTPUT inserted.job_id, inserted.attempts
FROM OPENJSON(:claims)
     WITH (job_id BIGINT '$.job_id', generation INT '$.generation',
           worker_id NVARCHAR(400) '$.worker_id') AS c
JOIN portq_job AS j WITH (FORCESEEK, ROWLOCK)
  ON j.job_id = c.job_id AND j.attempts = c.generation
     AND j.worker_id = c.worker_id COLLATE Latin1_General_100_BIN2
     AND DATALENGTH(j.worker_id) = DATALENGTH(c.worker_id)
WHERE j.state = N'running' AND j.lease_until > SYSUTCDATETIME();

-- name: fail
UPDATE portq_job
SET state = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN N'dead' ELSE N'ready' END,
    run_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts THEN run_at
                  ELSE DATEADD(MILLISECOND, CAST(:retry_ms % 86400000 AS INT),
                               DATEADD(DAY, CAST(:retry_ms / 86400000 AS INT), SYSUTCDATETIME()))
             END,
    finished_at = CASE WHEN :retryable = 0 OR attempts >= max_attempts
                       THEN SYSUTCDATETIME() END,
    worker_id = NULL, lease_until = NULL, last_error = :error
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))
  AND state = N'running' AND lease_until > SYSUTCDATETIME();

-- name: record_error
INSERT INTO portq_job_error (job_id, attempt, worker_id, error, failed_at)
VALUES (:job_id, :generation, :worker_id, :error, SYSUTCDATETIME());

-- name: job_errors
SELECT attempt, worker_id, error, failed_at FROM portq_job_error WITH (READPAST, READCOMMITTEDLOCK)
WHERE job_id = :job_id ORDER BY attempt;

-- name: release
-- Give a claimed job back unstarted (shutdown, a stale look-ahead, a late claim). Its
-- attempt is given back (max_attempts + 1, given_back + 1) while given_back is under the
-- job's own budget (max_attempts - given_back, i.e. 2 * given_back < max_attempts), so a
-- job is never claimed without end without a handler running it; past that the give-back
-- spends the attempt, and a job whose attempts are then spent goes dead, saying why.
-- (SET expressions see the row as it was before the UPDATE.)
UPDATE portq_job
SET state = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN N'ready' ELSE N'dead' END,
    finished_at = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN NULL ELSE SYSUTCDATETIME() END,
    last_error = CASE WHEN (2 * given_back < max_attempts OR attempts < max_attempts) THEN last_error
                      ELSE CONCAT(N'given back unstarted ', given_back,
                                  N' times with its attempt, then with its last one') END,
    max_attempts = max_attempts + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    given_back = given_back + CASE WHEN 2 * given_back < max_attempts THEN 1 ELSE 0 END,
    worker_id = NULL, lease_until = NULL, run_at = SYSUTCDATETIME()
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))
  AND state = N'running' AND lease_until > SYSUTCDATETIME();

-- SET expressions see the row as it was before the UPDATE, so last_error names the
-- worker that lost the lease.
-- name: reap
WITH c AS (
    SELECT TOP (:limit) state, run_at, attempts, max_attempts, worker_id, lease_until,
           last_error, finished_at
    FROM portq_job WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE state = N'running' AND lease_until <= SYSUTCDATETIME()
    ORDER BY lease_until
)
UPDATE c
SET state = CASE WHEN attempts >= max_attempts THEN N'dead' ELSE N'ready' END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at
                  ELSE DATEADD(MILLISECOND, CAST(:delay_ms % 86400000 AS INT),
                               DATEADD(DAY, CAST(:delay_ms / 86400000 AS INT), SYSUTCDATETIME()))
             END,
    finished_at = CASE WHEN attempts >= max_attempts THEN SYSUTCDATETIME() END,
    last_error = CONCAT(N'lease expired (worker ', worker_id, N', attempt ', attempts, N')'),
    worker_id = NULL, lease_until = NULL;

-- The literal state IN (...) repeats the filter of portq_job_finished_idx: a filtered
-- index only matches literals, never the bound :states, and without it the prune would be
-- a clustered scan + sort under UPDLOCK that can escalate to a table lock.
-- name: prune
WITH c AS (
    SELECT TOP (:limit) job_id
    FROM portq_job WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE state IN (N'succeeded', N'dead', N'cancelled') AND state IN (:states) AND (:queue = N'*' OR queue = :queue)
      AND finished_at < DATEADD(MILLISECOND, -CAST(:older_than_ms % 86400000 AS INT),
                                DATEADD(DAY, -CAST(:older_than_ms / 86400000 AS INT),
                                        SYSUTCDATETIME()))
      -- never a result an unfinished dependent may still read (migration 12)
      AND NOT EXISTS (SELECT 1 FROM portq_job_dep AS d JOIN portq_job AS w ON w.job_id = d.job_id
                      WHERE d.depends_on = portq_job.job_id
                        AND w.state IN (N'waiting', N'ready', N'running'))
    ORDER BY finished_at
)
DELETE FROM c;

-- name: retry_dead
-- The attempts it had left plus :extra (a job cancelled before it ran keeps its whole
-- budget), saturating at the largest INT instead of overflowing.
UPDATE portq_job
SET state = N'ready', finished_at = NULL,
    max_attempts = max_attempts + CASE WHEN :extra < 2147483647 - max_attempts
                                      THEN :extra ELSE 2147483647 - max_attempts END,
    run_at = SYSUTCDATETIME()
WHERE job_id = :job_id AND state IN (N'dead', N'cancelled');

-- name: cancel
UPDATE portq_job
SET state = N'cancelled', worker_id = NULL, lease_until = NULL, finished_at = SYSUTCDATETIME(),
    deps_left = 0
WHERE job_id = :job_id AND state IN (N'ready', N'running', N'waiting');

-- name: stats
SELECT queue,
       SUM(CASE WHEN state = N'ready' AND run_at <= n.db_now THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = N'ready' AND run_at > n.db_now THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = N'running' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = N'succeeded' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = N'dead' THEN 1 ELSE 0 END),
       SUM(CASE WHEN state = N'cancelled' THEN 1 ELSE 0 END),
       MIN(CASE WHEN state = N'ready' AND run_at <= n.db_now THEN run_at END),
       MAX(n.db_now),
       SUM(CASE WHEN state = N'waiting' THEN 1 ELSE 0 END)
FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
CROSS JOIN (SELECT SYSUTCDATETIME() AS db_now) AS n
WHERE :queue = N'*' OR queue = :queue
GROUP BY queue;

-- name: pending
-- Whether the queue has a job ready and due, and whether it has one running (a burst
-- worker's exit test). Each EXISTS stops at the first entry of the filtered ready or
-- running index (the literal state implies each index's filter), so its cost does not grow
-- with the table; `stats` counts every row of the queue instead. READPAST and
-- READCOMMITTEDLOCK as in `stats`.
SELECT CASE WHEN EXISTS (SELECT 1 FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
                      WHERE queue = :queue AND state = N'ready'
                        AND run_at <= SYSUTCDATETIME()) THEN 1 ELSE 0 END,
       CASE WHEN EXISTS (SELECT 1 FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
                      WHERE queue = :queue AND state = N'running') THEN 1 ELSE 0 END;

-- Listing jobs (portq jobs, the dashboard), paged by key: after_id/after_run_at are the
-- last row of the previous page (after_id = 0 on the first page). Filters: state, queue,
-- payload text (lower-cased LIKE pattern, '!' escapes). Three orders. (A key filter is a
-- job_id_by_key lookup instead: at most one job, by the unique index.)
-- name: jobs
SELECT TOP (:limit) job_id, queue, state, payload, priority, attempts, max_attempts,
       CAST(job_key AS NVARCHAR(510)), run_at, worker_id, lease_until, last_error, created_at,
       finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
WHERE (:state = N'*' OR state = :state) AND (:queue = N'*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(payload) LIKE :pattern ESCAPE N'!')
  AND job_id > :after_id
ORDER BY job_id;

-- name: jobs_newest
SELECT TOP (:limit) job_id, queue, state, payload, priority, attempts, max_attempts,
       CAST(job_key AS NVARCHAR(510)), run_at, worker_id, lease_until, last_error, created_at,
       finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
WHERE (:state = N'*' OR state = :state) AND (:queue = N'*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(payload) LIKE :pattern ESCAPE N'!')
  AND (:after_id = 0 OR job_id < :after_id)
ORDER BY job_id DESC;

-- name: jobs_by_run_at
SELECT TOP (:limit) job_id, queue, state, payload, priority, attempts, max_attempts,
       CAST(job_key AS NVARCHAR(510)), run_at, worker_id, lease_until, last_error, created_at,
       finished_at,
       progress, progress_note, progress_at, given_back + snoozes AS released
FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
WHERE (:state = N'*' OR state = :state) AND (:queue = N'*' OR queue = :queue)
  AND (:any_text = 1 OR LOWER(payload) LIKE :pattern ESCAPE N'!')
  AND (:after_id = 0 OR run_at > CAST(:after_run_at AS DATETIME2(6))
       OR (run_at = CAST(:after_run_at AS DATETIME2(6)) AND job_id > :after_id))
ORDER BY run_at, job_id;

-- name: job
SELECT job_id, queue, state, payload, priority, attempts, max_attempts,
       CAST(job_key AS NVARCHAR(510)), run_at, worker_id, lease_until, last_error, created_at,
       finished_at,
       progress, progress_note, progress_at,
       given_back + snoozes AS released, meta, started_at, first_started_at
FROM portq_job
WHERE job_id = :job_id;

-- Bulk operator actions (portq retry/cancel --queue Q --state S): one bounded batch each.
-- name: retry_many
WITH c AS (
    SELECT TOP (:limit) job_id, state, max_attempts, attempts, finished_at, run_at
    FROM portq_job WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE state IN (:states) AND (:queue = N'*' OR queue = :queue)
    ORDER BY job_id
)
UPDATE c
SET state = N'ready', max_attempts = attempts + :extra, finished_at = NULL,
    run_at = SYSUTCDATETIME()
OUTPUT inserted.job_id;

-- name: cancel_many
WITH c AS (
    SELECT TOP (:limit) state, worker_id, lease_until, finished_at, deps_left
    FROM portq_job WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE state IN (:states) AND (:queue = N'*' OR queue = :queue)
    ORDER BY job_id
)
UPDATE c
SET state = N'cancelled', worker_id = NULL, lease_until = NULL,
    finished_at = SYSUTCDATETIME(), deps_left = 0;

-- What `portq conformance` prints first: server version, this session's isolation level
-- (sys.dm_exec_sessions; transaction_isolation_level 1-5 as documented). Where the login
-- may not read the view, server_version alone is shown.
-- name: server_info
SELECT CAST(SERVERPROPERTY('ProductVersion') AS NVARCHAR(128)),
       CASE transaction_isolation_level WHEN 1 THEN N'READ UNCOMMITTED'
            WHEN 2 THEN N'READ COMMITTED' WHEN 3 THEN N'REPEATABLE READ'
            WHEN 4 THEN N'SERIALIZABLE' WHEN 5 THEN N'SNAPSHOT' ELSE N'UNSPECIFIED' END
FROM sys.dm_exec_sessions
WHERE session_id = @@SPID;

-- name: server_version
SELECT CAST(SERVERPROPERTY('ProductVersion') AS NVARCHAR(128));

-- Does a table of this prefix exist (before `portq conformance` drops it)?
-- name: table_exists
SELECT 1 WHERE OBJECT_ID(:name, N'U') IS NOT NULL;

-- `portq stats` over the last :window_ms: failed attempts recorded (portq_job_error) and
-- jobs that succeeded, per queue (retry_rate = failed / (failed + succeeded)).
-- name: attempt_stats
SELECT queue, SUM(failed), SUM(succeeded)
FROM (
    SELECT j.queue AS queue, 1 AS failed, 0 AS succeeded
    FROM portq_job_error AS e JOIN portq_job AS j ON j.job_id = e.job_id
    WHERE e.failed_at > DATEADD(MILLISECOND, -CAST(:window_ms % 86400000 AS INT),
                      DATEADD(DAY, -CAST(:window_ms / 86400000 AS INT), SYSUTCDATETIME()))
      AND (:queue = N'*' OR j.queue = :queue)
    UNION ALL
    SELECT queue, 0, 1
    FROM portq_job
    WHERE state = N'succeeded' AND finished_at > DATEADD(MILLISECOND, -CAST(:window_ms % 86400000 AS INT),
                      DATEADD(DAY, -CAST(:window_ms / 86400000 AS INT), SYSUTCDATETIME()))
      AND (:queue = N'*' OR queue = :queue)
) AS a
GROUP BY queue;

-- Jobs finished per minute over the last :minutes minutes (the dashboard's charts); walks
-- the finished index.
-- name: finished_per_minute
SELECT queue, state, DATEDIFF(SECOND, finished_at, SYSUTCDATETIME()) / 60, COUNT(*)
FROM portq_job
WHERE state IN (N'succeeded', N'dead', N'cancelled')
  AND finished_at > DATEADD(MINUTE, -CAST(:minutes AS INT), SYSUTCDATETIME())
GROUP BY queue, state, DATEDIFF(SECOND, finished_at, SYSUTCDATETIME()) / 60;

-- name: delete_finished
DELETE FROM portq_job
WHERE job_id = :job_id AND state IN (N'succeeded', N'dead', N'cancelled');

-- The worker registry (migration 3). A heartbeat first deletes the rows of workers whose
-- heartbeats stopped, then renews its own row (inserting it when it is missing).
-- name: expire_workers
DELETE FROM portq_worker WHERE expires_at <= SYSUTCDATETIME();

-- name: register_worker
INSERT INTO portq_worker (worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules,
                          started_at, heartbeat_at, expires_at)
VALUES (:worker_id, :host, :pid, :queues, :concurrency, :jobs_in_hand, :schedules, SYSUTCDATETIME(),
        SYSUTCDATETIME(), DATEADD(MILLISECOND, CAST(:ttl_ms % 86400000 AS INT),
                  DATEADD(DAY, CAST(:ttl_ms / 86400000 AS INT), SYSUTCDATETIME())));

-- name: worker_heartbeat
UPDATE portq_worker
SET jobs_in_hand = :jobs_in_hand, schedules = :schedules, heartbeat_at = SYSUTCDATETIME(),
    expires_at = DATEADD(MILLISECOND, CAST(:ttl_ms % 86400000 AS INT),
                  DATEADD(DAY, CAST(:ttl_ms / 86400000 AS INT), SYSUTCDATETIME()))
WHERE worker_id = :worker_id;

-- name: deregister_worker
DELETE FROM portq_worker WHERE worker_id = :worker_id;

-- name: workers
SELECT worker_id, host, pid, queues, concurrency, jobs_in_hand, schedules, started_at,
       heartbeat_at, SYSUTCDATETIME()
FROM portq_worker
WHERE expires_at > SYSUTCDATETIME()
ORDER BY started_at, worker_id;

-- Results (migration 5). store_result runs lock_owned_job (UPDLOCK holds the job row until
-- the transaction ends, so no reap or claim can take the job meanwhile; READCOMMITTEDLOCK
-- reads the committed row, not a version, under READ_COMMITTED_SNAPSHOT), then delete_result
-- and insert_result, in one transaction: the result is written only while the claim still
-- owns the job.
-- name: lock_owned_job
SELECT job_id FROM portq_job WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))
  AND state = N'running' AND lease_until > SYSUTCDATETIME();

-- name: delete_result
DELETE FROM portq_result WHERE job_id = :job_id;

-- name: insert_result
INSERT INTO portq_result (job_id, generation, result) VALUES (:job_id, :generation, :result);

-- name: job_result
SELECT r.result FROM portq_result r JOIN portq_job j ON j.job_id = r.job_id
WHERE r.job_id = :job_id AND j.state = N'succeeded';

-- name: unique_ensure
-- Scoped uniqueness: make the scoped key's row exist. The NOT EXISTS probe is a plain read
-- (no UPDLOCK, HOLDLOCK: on an absent key those range-lock the gap to the caller's commit,
-- so enqueues of other new keys in that gap wait, and two transactions each enqueueing two
-- new keys can deadlock, 1205). Two sessions inserting the same new key meet on the
-- primary key: the second waits for the first, then fails with 2627, which only rolls back
-- this statement (XACT_ABORT OFF) and which SqlServerBackend.ensure_row catches: the row
-- exists then.
INSERT INTO portq_job_unique (unique_hash, job_id)
SELECT CAST(:hash AS CHAR(64)), NULL
WHERE NOT EXISTS (SELECT 1 FROM portq_job_unique
                  WHERE unique_hash = CAST(:hash AS CHAR(64)));

-- name: unique_lock
-- Lock the scoped key's row (UPDLOCK, held to commit): its latest job id (NULL when none).
SELECT job_id FROM portq_job_unique WITH (UPDLOCK, ROWLOCK, HOLDLOCK)
WHERE unique_hash = CAST(:hash AS CHAR(64));

-- name: unique_job
-- That job's state, and whether it was created less than :period_ms ago. READCOMMITTEDLOCK:
-- under READ_COMMITTED_SNAPSHOT a row-versioned read could miss the job a predecessor
-- just committed.
SELECT state,
       CASE WHEN :period_ms IS NULL
                 OR created_at > DATEADD(MILLISECOND, -CAST(:period_ms % 86400000 AS INT),
                                         DATEADD(DAY, -CAST(:period_ms / 86400000 AS INT),
                                                 SYSUTCDATETIME()))
            THEN 1 ELSE 0 END
FROM portq_job WITH (READCOMMITTEDLOCK)
WHERE job_id = :job_id;

-- name: unique_point
UPDATE portq_job_unique SET job_id = :job_id WHERE unique_hash = CAST(:hash AS CHAR(64));

-- name: set_paused
-- Pause (:paused = 1) or resume (0) a queue; the row is made on first use. HOLDLOCK on
-- the MERGE target keeps two first uses from both inserting.
MERGE INTO portq_queue WITH (HOLDLOCK) AS t
USING (SELECT CAST(:queue AS NVARCHAR(128)) AS queue) AS s ON t.queue = s.queue
WHEN MATCHED THEN UPDATE SET paused = :paused, updated_at = SYSUTCDATETIME()
WHEN NOT MATCHED THEN INSERT (queue, paused, updated_at)
    VALUES (s.queue, :paused, SYSUTCDATETIME());

-- name: paused_queues
SELECT queue FROM portq_queue WHERE paused = 1 ORDER BY queue;

-- name: queue_limits
-- Every queue with a portq_queue row (portq stats): paused, running limit, rate limit,
-- fair (migration 13).
SELECT queue, CAST(paused AS INT), concurrency_limit, rate_limit, rate_period_ms,
       CAST(fair AS INT)
FROM portq_queue WHERE :queue = N'*' OR queue = :queue;

-- name: queue_control
-- The queue's limits, update-locked to the end of the claim's transaction: claimers of a
-- limited queue take turns counting its running jobs and reading its rate log.
SELECT concurrency_limit, rate_limit, rate_period_ms, rate_log, CAST(fair AS INT),
       CAST(fair_after AS NVARCHAR(510))
FROM portq_queue WITH (UPDLOCK, ROWLOCK, HOLDLOCK)
WHERE queue = :queue;

-- name: running_count
-- READCOMMITTEDLOCK: under READ_COMMITTED_SNAPSHOT a row version could miss the running
-- jobs the previous lock holder committed.
SELECT COUNT(*) FROM portq_job WITH (READCOMMITTEDLOCK)
WHERE queue = :queue AND state = N'running';

-- name: set_concurrency_limit
MERGE INTO portq_queue WITH (HOLDLOCK) AS t
USING (SELECT CAST(:queue AS NVARCHAR(128)) AS queue) AS s ON t.queue = s.queue
WHEN MATCHED THEN UPDATE SET concurrency_limit = :max_running, updated_at = SYSUTCDATETIME()
WHEN NOT MATCHED THEN INSERT (queue, concurrency_limit, updated_at)
    VALUES (s.queue, :max_running, SYSUTCDATETIME());

-- name: set_rate_limit
-- At most :rate_limit jobs started per :period_ms (NULLs: none, and the log is cleared).
MERGE INTO portq_queue WITH (HOLDLOCK) AS t
USING (SELECT CAST(:queue AS NVARCHAR(128)) AS queue) AS s ON t.queue = s.queue
WHEN MATCHED THEN UPDATE SET
    rate_log = CASE WHEN CAST(:rate_limit AS INT) IS NULL THEN NULL ELSE t.rate_log END,
    rate_limit = CAST(:rate_limit AS INT), rate_period_ms = CAST(:period_ms AS BIGINT),
    updated_at = SYSUTCDATETIME()
WHEN NOT MATCHED THEN INSERT (queue, rate_limit, rate_period_ms, updated_at)
    VALUES (s.queue, CAST(:rate_limit AS INT), CAST(:period_ms AS BIGINT), SYSUTCDATETIME());

-- name: db_clock_ms
-- The DB clock in epoch milliseconds, read by a statement after queue_control took the
-- row's lock (DATEDIFF_BIG: SQL Server 2016+).
SELECT DATEDIFF_BIG(MILLISECOND, CAST('1970-01-01' AS DATETIME2(6)), SYSUTCDATETIME());

-- name: set_rate_log
UPDATE portq_queue SET rate_log = :rate_log WHERE queue = :queue;

-- name: ensure_queue
-- The queue's row, made if missing: a plain probe, then the insert; a concurrent first
-- insert raises 2627 (caught by SqlServerBackend.ensure_row, as for unique_ensure).
INSERT INTO portq_queue (queue, updated_at)
SELECT :queue, SYSUTCDATETIME()
WHERE NOT EXISTS (SELECT 1 FROM portq_queue WHERE queue = :queue);

-- name: key_running_count
-- A key's running jobs, read after the queue row's lock. READPAST skips rows another
-- transaction holds locked: a claimer not yet through its own recount (it counts this
-- one's rows after it gets the lock) -- and also a running row a completion or failure
-- has locked but not committed (an undercount only if that transaction rolls back).
-- This transaction's own rows are counted (its own locks do not block it).
SELECT COUNT(*) FROM portq_job WITH (READCOMMITTEDLOCK, READPAST)
WHERE queue = :queue AND concurrency_key = CAST(CAST(:concurrency_key AS NVARCHAR(510)) AS VARBINARY(1020))
  AND state = N'running' AND concurrency_key IS NOT NULL;

-- name: unclaim
-- Put back a job this claim took beyond its key's limit: ready again, attempt undone.
UPDATE portq_job
SET state = N'ready', attempts = attempts - 1, worker_id = NULL, lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400))) AND state = N'running';

-- name: compatibility_level
-- The database's compatibility level: OPENJSON (complete_many, renew_many) needs 130+, and
-- a database restored from an older server keeps its old level. The connected database's
-- row of sys.databases is visible to every login.
SELECT compatibility_level, DB_NAME() FROM sys.databases WHERE database_id = DB_ID();

-- name: next_lease_expiry_ms
-- Milliseconds until the earliest running lease expires (negative: already expired; NULL:
-- nothing runs). READPAST skips rows a claim or renewal holds right now (their leases are
-- the newest); READCOMMITTEDLOCK as every other read here. DATEDIFF_BIG: SQL Server 2016+.
SELECT DATEDIFF_BIG(MILLISECOND, SYSUTCDATETIME(), MIN(lease_until))
FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
WHERE state = N'running';

-- name: snooze
-- A handler raised portq.Snooze: back to ready after :delay_ms without spending the attempt
-- (max_attempts + 1), at most :max_snoozes times per job (then nothing changes and the
-- worker records the attempt as failed instead); fenced like every owner's write.
-- The delay is added as whole days plus milliseconds, as insert_job's (DATEADD's number is
-- an int).
UPDATE portq_job
SET state = N'ready',
    run_at = DATEADD(MILLISECOND, CAST(:delay_ms % 86400000 AS INT),
                     DATEADD(DAY, CAST(:delay_ms / 86400000 AS INT), SYSUTCDATETIME())),
    max_attempts = max_attempts + 1, snoozes = snoozes + 1, worker_id = NULL,
    lease_until = NULL
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))
  AND state = N'running' AND lease_until > SYSUTCDATETIME() AND snoozes < :max_snoozes;

-- Progress (migration 11): the running job's last report, fenced like every write of its
-- owner (job, generation, worker compared exactly, running, lease not expired); rowcount
-- 1 = written (portq never sets NOCOUNT ON).
-- name: set_progress
UPDATE portq_job
SET progress = CAST(:progress AS FLOAT), progress_note = CAST(:note AS NVARCHAR(400)),
    progress_at = SYSUTCDATETIME()
WHERE job_id = :job_id AND attempts = :generation AND worker_id = :worker_id
  AND DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))
  AND state = N'running' AND lease_until > SYSUTCDATETIME();

-- name: worker_activity
-- The dashboard's Workers page: each live worker's row expiry and the running jobs the job
-- table says it holds (the filtered index portq_job_lease_idx holds only running rows;
-- READPAST skips rows a completion holds locked: a display, never a decision).
SELECT w.worker_id, w.expires_at, SYSUTCDATETIME(),
       (SELECT COUNT(*) FROM portq_job j WITH (READCOMMITTEDLOCK, READPAST)
        WHERE j.state = N'running' AND j.lease_until IS NOT NULL
          AND j.worker_id = w.worker_id AND DATALENGTH(j.worker_id) = DATALENGTH(w.worker_id))
FROM portq_worker w
WHERE w.expires_at > SYSUTCDATETIME();

-- name: job_concurrency
-- A job's per-key limit (enqueue(concurrency_key=, concurrency_limit=)), for its page: the
-- key is the VARBINARY of an NVARCHAR, cast back to text.
SELECT CAST(concurrency_key AS NVARCHAR(510)), concurrency_limit
FROM portq_job WHERE job_id = :job_id;

-- name: queue_key_limits
-- The queue page's per-key limits in use: the keys of the queue's running jobs, each with
-- its limit and running count, busiest first (the filtered portq_job_ckey_idx: the
-- statement repeats its literals; READPAST as in key_running_count: a display).
SELECT TOP (:limit) CAST(concurrency_key AS NVARCHAR(510)), MAX(concurrency_limit), COUNT(*)
FROM portq_job WITH (READCOMMITTEDLOCK, READPAST)
WHERE queue = :queue AND state = N'running' AND concurrency_key IS NOT NULL
GROUP BY concurrency_key
ORDER BY COUNT(*) DESC, concurrency_key;

-- ---- throughput and latency statistics (Queue.job_stats; portq stats; the dashboard) ----
-- Both read only the jobs that finished within the window, seeking the filtered index
-- portq_job_finished_idx over that range: the cost follows the rows in the window, never
-- the table. The state filter is the index's own literal list (a parameter could not
-- imply it). READPAST, READCOMMITTEDLOCK as `stats`: with READ_COMMITTED_SNAPSHOT off a
-- plain read would wait on a job being finished; statistics skip that row instead.

-- name: stats_series
-- Jobs finished per bucket of :bucket_s seconds over the last :window_s seconds, per queue
-- and state (bucket 0 the current one).
SELECT queue, state, ago, COUNT(*)
FROM (SELECT queue, state,
             DATEDIFF(SECOND, finished_at, SYSUTCDATETIME()) / CAST(:bucket_s AS INT) AS ago
      FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
      WHERE state IN (N'succeeded', N'dead', N'cancelled')
        AND finished_at > DATEADD(SECOND, -CAST(:window_s AS INT), SYSUTCDATETIME())) t
GROUP BY queue, state, ago;

-- name: stats_latency
-- Wait (created -> first start) and run (latest start -> finish) time of the succeeded and
-- dead jobs of the window, as counts per queue and pair of log buckets: bucket b holds
-- durations from 2^(b/4) ms (durations under 1 ms fall in bucket 0); NULL when the job has
-- no start time. LOG(x, 2): SQL Server 2012+.
SELECT queue, wait_b, run_b, COUNT(*)
FROM (SELECT queue,
             CAST(FLOOR(4 * LOG(CASE WHEN DATEDIFF_BIG(MICROSECOND, created_at,
                                                       first_started_at) > 1000
                                     THEN DATEDIFF_BIG(MICROSECOND, created_at,
                                                       first_started_at) / 1000.0
                                     ELSE 1.0 END, 2)) AS INT) AS wait_b,
             CAST(FLOOR(4 * LOG(CASE WHEN DATEDIFF_BIG(MICROSECOND, started_at,
                                                       finished_at) > 1000
                                     THEN DATEDIFF_BIG(MICROSECOND, started_at,
                                                       finished_at) / 1000.0
                                     ELSE 1.0 END, 2)) AS INT) AS run_b
      FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)
      WHERE state IN (N'succeeded', N'dead', N'cancelled') AND state <> N'cancelled'
        AND finished_at > DATEADD(SECOND, -CAST(:window_s AS INT), SYSUTCDATETIME())) t
GROUP BY queue, wait_b, run_b;

-- ---- job dependencies (migration 12; portq/backends/dependencies.py) -------------------
-- UPDLOCK reads hold the dependency's row to commit (READ COMMITTED, set on every session):
-- its completion waits for this enqueue, and this read sees the row as last committed.
-- name: dep_lock
SELECT job_id, state FROM portq_job WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
WHERE job_id IN (:dep_ids)
ORDER BY job_id;

-- name: dep_flag
UPDATE portq_job SET has_dependents = 1
WHERE job_id IN (:dep_ids) AND has_dependents = 0 AND state IN (N'ready', N'running', N'waiting');

-- name: dep_insert
INSERT INTO portq_job_dep (job_id, depends_on, resolved)
SELECT :job_id, job_id, CASE WHEN :count_unfinished = 1 AND state IN (N'ready', N'running', N'waiting') THEN 0 ELSE 1 END
FROM portq_job WHERE job_id IN (:dep_ids);

-- name: dep_wait
UPDATE portq_job SET state = N'waiting', deps_left = :deps_left, dep_failure = :dep_failure
WHERE job_id = :job_id AND state = N'ready';

-- name: dep_release
UPDATE portq_job
SET state = CASE WHEN deps_left = 1 THEN N'ready' ELSE state END, deps_left = deps_left - 1
WHERE state = N'waiting' AND (:every = 1 OR dep_failure = 1)
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- name: dep_cancel_ids
SELECT job_id, has_dependents FROM portq_job WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
WHERE state = N'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- name: dep_cancel
UPDATE portq_job
SET state = N'cancelled', deps_left = 0, finished_at = SYSUTCDATETIME(), last_error = :error
WHERE state = N'waiting' AND dep_failure = 0
  AND job_id IN (SELECT job_id FROM portq_job_dep WHERE depends_on = :job_id AND resolved = 0);

-- name: dep_cancel_job
UPDATE portq_job SET state = N'cancelled', finished_at = SYSUTCDATETIME(), last_error = :error
WHERE job_id = :job_id AND state = N'ready';

-- name: dep_resolve
UPDATE portq_job_dep SET resolved = 1 WHERE depends_on = :job_id AND resolved = 0;

-- name: dep_unflag
UPDATE portq_job SET has_dependents = 0 WHERE job_id = :job_id;

-- name: dep_unsettled
SELECT job_id, state FROM portq_job WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
WHERE has_dependents = 1 AND state IN (N'dead', N'cancelled')
ORDER BY job_id;

-- Retrying a dependency (retry_dead, retry_many; dependencies.revive) revives the
-- dependents its failure cancelled: those cancelled with the reason naming it
-- (dependencies.failure_reason's text), locked; then each is checked and reopened.
-- name: dep_revive_ids
SELECT j.job_id FROM portq_job_dep AS d
JOIN portq_job AS j WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK) ON j.job_id = d.job_id
WHERE d.depends_on IN (:dep_ids) AND j.state = N'cancelled'
  AND j.last_error IN (CONCAT(N'cancelled: its dependency, job ', d.depends_on, N', ended dead'),
                       CONCAT(N'cancelled: its dependency, job ', d.depends_on, N', ended cancelled'))
ORDER BY j.job_id;

-- A revived dependent's edges to its unfinished dependencies count again.
-- name: dep_reopen
UPDATE portq_job_dep SET resolved = 0 WHERE job_id = :job_id AND depends_on IN (:dep_ids);

-- name: dep_revive
UPDATE portq_job
SET state = N'waiting', deps_left = :deps_left, finished_at = NULL, last_error = NULL
WHERE job_id = :job_id AND state = N'cancelled';

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
MERGE INTO portq_queue WITH (HOLDLOCK) AS t
USING (SELECT CAST(:queue AS NVARCHAR(128)) AS queue) AS s ON t.queue = s.queue
WHEN MATCHED THEN UPDATE SET fair = :fair, fair_after = NULL, updated_at = SYSUTCDATETIME()
WHEN NOT MATCHED THEN INSERT (queue, fair, updated_at)
    VALUES (s.queue, :fair, SYSUTCDATETIME());

-- name: set_fair_after
-- The key a fair claim served last (NULL: the unkeyed jobs' turn), under the row's lock;
-- stored as concurrency_key is (the NVARCHAR's bytes).
UPDATE portq_queue SET fair_after = CAST(CAST(:after AS NVARCHAR(510)) AS VARBINARY(1020))
WHERE queue = :queue;

-- name: fair_first_key
-- The smallest key with a ready job (portq_job_fair_idx: one seek). READPAST: a row an
-- uncommitted enqueue holds is not waited on (READCOMMITTEDLOCK makes it legal under
-- READ_COMMITTED_SNAPSHOT ON).
SELECT TOP (1) CAST(concurrency_key AS NVARCHAR(510))
FROM portq_job WITH (READCOMMITTEDLOCK, READPAST)
WHERE queue = :queue AND state = N'ready' AND concurrency_key IS NOT NULL
ORDER BY concurrency_key;

-- name: fair_next_key
-- The next key after :after with a ready job (one seek on portq_job_fair_idx; keys
-- compare as bytes).
SELECT TOP (1) CAST(concurrency_key AS NVARCHAR(510))
FROM portq_job WITH (READCOMMITTEDLOCK, READPAST)
WHERE queue = :queue AND state = N'ready' AND concurrency_key > CAST(CAST(:after AS NVARCHAR(510)) AS VARBINARY(1020))
ORDER BY concurrency_key;

-- name: claim_key
-- The claim of one key's jobs: `claim` with the key fixed, walking portq_job_fair_idx
-- (queue, concurrency_key, priority DESC, run_at, job_id) in order.
WITH c AS (
    SELECT TOP (:limit) job_id, queue, payload, priority, state, attempts, max_attempts,
           job_key, worker_id, lease_until, concurrency_key, concurrency_limit, timeout_ms,
           started_at, first_started_at, run_at, meta
    FROM portq_job WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE queue = :queue AND concurrency_key = CAST(CAST(:concurrency_key AS NVARCHAR(510)) AS VARBINARY(1020)) AND state = N'ready'
      AND run_at <= SYSUTCDATETIME() AND attempts < max_attempts
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
      AND (SELECT COUNT(*) FROM portq_job AS r WITH (READCOMMITTEDLOCK, READPAST)
           WHERE r.queue = :queue AND r.concurrency_key = CAST(CAST(:concurrency_key AS NVARCHAR(510)) AS VARBINARY(1020))
             AND r.state = N'running' AND r.concurrency_key IS NOT NULL)
          < concurrency_limit
    ORDER BY concurrency_key, priority DESC, run_at, job_id
)
UPDATE c
SET state = N'running',
    attempts = attempts + 1,
    worker_id = :worker_id,
    lease_until = DATEADD(MILLISECOND, CAST(:lease_ms % 86400000 AS INT),
                          DATEADD(DAY, CAST(:lease_ms / 86400000 AS INT), SYSUTCDATETIME())),
    started_at = SYSUTCDATETIME(),
    first_started_at = COALESCE(first_started_at, SYSUTCDATETIME())
OUTPUT inserted.job_id, inserted.queue, inserted.payload, inserted.priority, inserted.attempts,
       inserted.max_attempts, CAST(inserted.job_key AS NVARCHAR(510)) AS job_key,
       inserted.lease_until,
       CAST(inserted.concurrency_key AS NVARCHAR(510)) AS concurrency_key,
       inserted.concurrency_limit, inserted.timeout_ms, inserted.run_at, inserted.meta;

-- name: claim_unkeyed
-- The claim of the queue's unkeyed jobs (their turn in a round): `claim` with
-- concurrency_key IS NULL, walking portq_job_fair_idx's NULL-key entries in order.
-- The ORDER BY names the key (fixed here) first, as the index does: the walk then needs
-- no sort in any plan (PostgreSQL's generic plan sorted every unkeyed ready row without it).
WITH c AS (
    SELECT TOP (:limit) job_id, queue, payload, priority, state, attempts, max_attempts,
           job_key, worker_id, lease_until, concurrency_key, concurrency_limit, timeout_ms,
           started_at, first_started_at, run_at, meta
    FROM portq_job WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
    WHERE queue = :queue AND concurrency_key IS NULL AND state = N'ready'
      AND run_at <= SYSUTCDATETIME() AND attempts < max_attempts
      AND NOT EXISTS (SELECT 1 FROM portq_queue AS p WHERE p.queue = :queue AND p.paused = 1)
    ORDER BY concurrency_key, priority DESC, run_at, job_id
)
UPDATE c
SET state = N'running',
    attempts = attempts + 1,
    worker_id = :worker_id,
    lease_until = DATEADD(MILLISECOND, CAST(:lease_ms % 86400000 AS INT),
                          DATEADD(DAY, CAST(:lease_ms / 86400000 AS INT), SYSUTCDATETIME())),
    started_at = SYSUTCDATETIME(),
    first_started_at = COALESCE(first_started_at, SYSUTCDATETIME())
OUTPUT inserted.job_id, inserted.queue, inserted.payload, inserted.priority, inserted.attempts,
       inserted.max_attempts, CAST(inserted.job_key AS NVARCHAR(510)) AS job_key,
       inserted.lease_until,
       CAST(inserted.concurrency_key AS NVARCHAR(510)) AS concurrency_key,
       inserted.concurrency_limit, inserted.timeout_ms, inserted.run_at, inserted.meta;
