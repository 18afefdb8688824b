-- portq schema for SQL Server 2017+ (Azure SQL Database too).
-- Times are DATETIME2(6) in UTC, always computed in SQL from SYSUTCDATETIME().
-- Text is NVARCHAR: pyodbc binds Python str as NVARCHAR, so comparisons with bound
-- parameters never convert the column (which would defeat the indexes).
-- Filtered indexes need ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS, ARITHABORT,
-- CONCAT_NULL_YIELDS_NULL and QUOTED_IDENTIFIER ON and NUMERIC_ROUNDABORT OFF for every
-- INSERT/UPDATE/DELETE on the table: the defaults of Microsoft's ODBC drivers.

-- migration: 1
CREATE TABLE portq_job (
    job_id       BIGINT IDENTITY(1, 1) NOT NULL CONSTRAINT portq_job_pk PRIMARY KEY,
    queue        NVARCHAR(128) NOT NULL,
    payload      NVARCHAR(MAX) NOT NULL CONSTRAINT portq_job_payload_ck CHECK (ISJSON(payload) = 1),
    state        NVARCHAR(16)  NOT NULL CONSTRAINT portq_job_state_df DEFAULT N'ready',
    priority     INT           NOT NULL CONSTRAINT portq_job_priority_df DEFAULT 0,
    run_at       DATETIME2(6)  NOT NULL,
    attempts     INT           NOT NULL CONSTRAINT portq_job_attempts_df DEFAULT 0,
    max_attempts INT           NOT NULL,
    job_key      NVARCHAR(255) NULL,
    worker_id    NVARCHAR(255) NULL,
    lease_until  DATETIME2(6)  NULL,
    last_error   NVARCHAR(MAX) NULL,
    created_at   DATETIME2(6)  NOT NULL CONSTRAINT portq_job_created_df DEFAULT SYSUTCDATETIME(),
    finished_at  DATETIME2(6)  NULL,
    CONSTRAINT portq_job_state_ck CHECK (state IN (N'ready', N'running', N'succeeded', N'dead', N'cancelled')),
    CONSTRAINT portq_job_running_ck CHECK (
        (state = N'running' AND worker_id IS NOT NULL AND lease_until IS NOT NULL)
        OR (state <> N'running' AND worker_id IS NULL AND lease_until IS NULL)),
    CONSTRAINT portq_job_finished_ck CHECK (
        (state IN (N'succeeded', N'dead', N'cancelled') AND finished_at IS NOT NULL)
        OR (state IN (N'ready', N'running') AND finished_at IS NULL)),
    CONSTRAINT portq_job_attempts_ck CHECK (attempts >= 0 AND attempts <= max_attempts),
    CONSTRAINT portq_job_max_attempts_ck CHECK (max_attempts > 0),
    CONSTRAINT portq_job_queue_ck CHECK (LEN(queue) BETWEEN 1 AND 128)
);

-- A UNIQUE constraint would allow only one NULL key: a filtered unique index allows many.
CREATE UNIQUE INDEX portq_job_key_uq ON portq_job (job_key) WHERE job_key IS NOT NULL;

-- The claim walks this filtered index in order for one queue (queue = ?), so that
-- TOP (n) with UPDLOCK + READPAST locks only the rows it returns.
CREATE INDEX portq_job_ready_idx ON portq_job (queue, priority DESC, run_at, job_id)
    INCLUDE (attempts, max_attempts) WHERE state = N'ready';
CREATE INDEX portq_job_lease_idx ON portq_job (lease_until) WHERE state = N'running';
CREATE INDEX portq_job_finished_idx ON portq_job (finished_at)
    WHERE state IN (N'succeeded', N'dead', N'cancelled');

CREATE TABLE portq_job_error (
    job_id     BIGINT        NOT NULL CONSTRAINT portq_job_error_job_fk
                   REFERENCES portq_job (job_id) ON DELETE CASCADE,
    attempt    INT           NOT NULL,
    worker_id  NVARCHAR(255) NOT NULL,
    error      NVARCHAR(MAX) NOT NULL,
    failed_at  DATETIME2(6)  NOT NULL CONSTRAINT portq_job_error_failed_df DEFAULT SYSUTCDATETIME(),
    CONSTRAINT portq_job_error_pk PRIMARY KEY (job_id, attempt)
);

-- migration: 2
-- 1. Every JSON value, on every version. Without its type argument (2022+) ISJSON accepts
--    only an object or an array, so the payloads null, 1, "x" and true broke the old CHECK.
--    A text P is one JSON value exactly when both [P] and {"v":P} are valid: the array form
--    alone would accept a list such as 1,2; the object form alone 1,"w":2.
ALTER TABLE portq_job DROP CONSTRAINT portq_job_payload_ck;
ALTER TABLE portq_job ADD CONSTRAINT portq_job_payload_ck CHECK (
    ISJSON(CONCAT(N'[', payload, N']')) = 1 AND ISJSON(CONCAT(N'{"v":', payload, N'}')) = 1);

-- 2. Queue names and worker ids compare exactly: a _BIN2 collation instead of the
--    database's default (usually case- and accent-insensitive). A column's collation cannot
--    change while an index or a CHECK constraint refers to it, so those are dropped and
--    created again, unchanged. worker_id widens to 400 UTF-16 code units: portq accepts 200
--    characters, and one outside the BMP takes two.
DROP INDEX portq_job_ready_idx ON portq_job;
ALTER TABLE portq_job DROP CONSTRAINT portq_job_queue_ck;
ALTER TABLE portq_job DROP CONSTRAINT portq_job_running_ck;
ALTER TABLE portq_job ALTER COLUMN queue NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL;
ALTER TABLE portq_job ALTER COLUMN worker_id NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NULL;
ALTER TABLE portq_job_error ALTER COLUMN worker_id NVARCHAR(400) COLLATE Latin1_General_100_BIN2 NOT NULL;
ALTER TABLE portq_job ADD CONSTRAINT portq_job_queue_ck CHECK (LEN(queue) BETWEEN 1 AND 128);
ALTER TABLE portq_job ADD CONSTRAINT portq_job_running_ck CHECK (
    (state = N'running' AND worker_id IS NOT NULL AND lease_until IS NOT NULL)
    OR (state <> N'running' AND worker_id IS NULL AND lease_until IS NULL));
CREATE INDEX portq_job_ready_idx ON portq_job (queue, priority DESC, run_at, job_id)
    INCLUDE (attempts, max_attempts) WHERE state = N'ready';

-- 3. Job keys compare as bytes: `=` and unique indexes ignore trailing spaces whatever the
--    collation, so 'k' and 'k ' collided. The key is stored as its UTF-16LE bytes
--    (CAST of the NVARCHAR text; 255 characters are at most 1020 bytes, under the 1700-byte
--    key limit of a nonclustered index). NVARCHAR does not convert implicitly to VARBINARY,
--    so ALTER COLUMN cannot do it: a new column is filled, the old one dropped, the new one
--    renamed. Binary comparison ignores trailing 0x00 bytes only, which a key never has
--    (portq refuses NUL).
DROP INDEX portq_job_key_uq ON portq_job;
ALTER TABLE portq_job ADD job_key_bytes VARBINARY(1020) NULL;
UPDATE portq_job SET job_key_bytes = CAST(job_key AS VARBINARY(1020)) WHERE job_key IS NOT NULL;
ALTER TABLE portq_job DROP COLUMN job_key;
EXEC sp_rename N'portq_job.job_key_bytes', N'job_key', N'COLUMN';
ALTER TABLE portq_job ADD CONSTRAINT portq_job_key_ck CHECK (DATALENGTH(job_key) > 0);
CREATE UNIQUE INDEX portq_job_key_uq ON portq_job (job_key) WHERE job_key IS NOT NULL;

-- migration: 3
-- The worker registry: each running worker keeps one row, renewed by its heartbeat
-- (expires_at = DB clock + ttl); a row whose heartbeats stopped expires and is deleted
-- by the next heartbeat of any worker. queues and schedules are JSON text.
CREATE TABLE portq_worker (
    worker_id    NVARCHAR(200) NOT NULL CONSTRAINT portq_worker_pk PRIMARY KEY,
    host         NVARCHAR(255) NOT NULL,
    pid          INT           NOT NULL,
    queues       NVARCHAR(MAX) NOT NULL,
    concurrency  INT           NOT NULL,
    jobs_in_hand INT           NOT NULL CONSTRAINT portq_worker_jobs_df DEFAULT 0,
    schedules    NVARCHAR(MAX) NOT NULL,
    started_at   DATETIME2(6)  NOT NULL CONSTRAINT portq_worker_started_df DEFAULT SYSUTCDATETIME(),
    heartbeat_at DATETIME2(6)  NOT NULL CONSTRAINT portq_worker_beat_df DEFAULT SYSUTCDATETIME(),
    expires_at   DATETIME2(6)  NOT NULL
);

-- migration: 5
-- A succeeded job's return value (JSON), written by the worker in its own fenced
-- transaction just before the completion (see docs/operations.md, "Results"). Deleting the
-- job (prune) deletes its result. No ISJSON check: without its type argument (2022+)
-- ISJSON refuses a scalar such as 42, a valid result; portq writes only json.dumps text.
CREATE TABLE portq_result (
    job_id     BIGINT        NOT NULL CONSTRAINT portq_result_pk PRIMARY KEY
                   CONSTRAINT portq_result_job_fk REFERENCES portq_job (job_id) ON DELETE CASCADE,
    generation INT           NOT NULL,
    result     NVARCHAR(MAX) NOT NULL,
    stored_at  DATETIME2(6)  NOT NULL CONSTRAINT portq_result_stored_df DEFAULT SYSUTCDATETIME()
);

-- migration: 6
-- Scoped uniqueness (Queue.enqueue(unique_for=, unique_states=, unique_per_queue=)): one
-- row per scoped key, the SHA-256 (hex, ASCII) of the scope and key, naming the key's
-- latest job. An enqueue locks this row (UPDLOCK, HOLDLOCK), reads the job's state and age,
-- and either returns that job or inserts a new one and points the row at it. Deleting the
-- job (prune) deletes its row.
CREATE TABLE portq_job_unique (
    unique_hash CHAR(64) COLLATE Latin1_General_100_BIN2 NOT NULL
                    CONSTRAINT portq_job_unique_pk PRIMARY KEY,
    job_id      BIGINT NULL CONSTRAINT portq_job_unique_job_fk
                    REFERENCES portq_job (job_id) ON DELETE CASCADE
);
CREATE INDEX portq_job_unique_job_idx ON portq_job_unique (job_id);

-- Per-queue flow control, one row per queue that has any: paused (claims of the queue
-- return nothing while 1; running jobs finish normally).
CREATE TABLE portq_queue (
    queue      NVARCHAR(128) COLLATE Latin1_General_100_BIN2 NOT NULL
                   CONSTRAINT portq_queue_pk PRIMARY KEY,
    paused     BIT          NOT NULL CONSTRAINT portq_queue_paused_df DEFAULT 0,
    -- at most that many running jobs of the queue (a claim locks this row, counts them)
    concurrency_limit INT NULL CONSTRAINT portq_queue_limit_ck CHECK (concurrency_limit > 0),
    updated_at DATETIME2(6) NOT NULL CONSTRAINT portq_queue_updated_df DEFAULT SYSUTCDATETIME()
);
CREATE INDEX portq_job_running_idx ON portq_job (queue) WHERE state = N'running';

-- migration: 7
-- Rate limits (Queue.set_rate_limit): at most rate_limit jobs of the queue started per
-- rate_period_ms over a sliding window; rate_log is a compact JSON list of
-- [db_epoch_ms, jobs] pairs (at most 64), read and written by claims holding this row's
-- update lock (docs/operations.md, "Rate limits").
ALTER TABLE portq_queue ADD
    rate_limit     INT           NULL CONSTRAINT portq_queue_rate_limit_ck CHECK (rate_limit > 0),
    rate_period_ms BIGINT        NULL CONSTRAINT portq_queue_rate_period_ck CHECK (rate_period_ms > 0),
    rate_log       NVARCHAR(MAX) NULL;
-- Per-key concurrency limits (enqueue(concurrency_key=, concurrency_limit=)): VARBINARY like
-- job_key (compared as bytes: the default collations ignore case, accents and trailing
-- spaces).
ALTER TABLE portq_job ADD
    concurrency_key   VARBINARY(1020) NULL,
    concurrency_limit INT             NULL,
    CONSTRAINT portq_job_ckey_ck CHECK (
        (concurrency_key IS NULL AND concurrency_limit IS NULL)
        OR (DATALENGTH(concurrency_key) > 0 AND concurrency_limit > 0));
-- counts a key's running jobs for the claim's row filter and its recount (filtered: the
-- statements repeat the filter's literals)
CREATE INDEX portq_job_ckey_idx ON portq_job (queue, concurrency_key)
    WHERE state = N'running' AND concurrency_key IS NOT NULL;

-- migration: 8
-- 1. Worker ids in the registry compare exactly, as in portq_job (migration 2): the primary
--    key blocks ALTER COLUMN's collation change, so it is dropped and added again.
ALTER TABLE portq_worker DROP CONSTRAINT portq_worker_pk;
ALTER TABLE portq_worker ALTER COLUMN worker_id NVARCHAR(200) COLLATE Latin1_General_100_BIN2 NOT NULL;
ALTER TABLE portq_worker ADD CONSTRAINT portq_worker_pk PRIMARY KEY (worker_id);
-- 2. The claim's per-key filter reads concurrency_key and concurrency_limit of each
--    candidate: the ready index includes them, so the filter runs on the index entry, not
--    after a lookup into the table per candidate.
--    (Dropped and made again in the migration's transaction: SQL Server DDL is transactional.)
DROP INDEX portq_job_ready_idx ON portq_job;
CREATE INDEX portq_job_ready_idx ON portq_job (queue, priority DESC, run_at, job_id)
    INCLUDE (attempts, max_attempts, concurrency_key, concurrency_limit) WHERE state = N'ready';

-- migration: 9
-- The worker runtime's per-job columns: timeout_ms, the longest one attempt may run
-- (enqueue(timeout=); NULL: the worker's job_timeout, if any); snoozes, how often a handler
-- rescheduled the job with portq.Snooze (which gives its attempt back, at most
-- MAX_SNOOZES times); given_back, how often a worker gave it back unstarted with its attempt
-- (release), bounded by its attempt budget so that a job is never claimed without end.
-- A column added NOT NULL with a DEFAULT gets the default in every existing row (WITH
-- VALUES is needed only for a nullable column: ALTER TABLE, column_definition).
ALTER TABLE portq_job ADD
    timeout_ms INT NULL CONSTRAINT portq_job_timeout_ck CHECK (timeout_ms > 0),
    snoozes    INT NOT NULL CONSTRAINT portq_job_snoozes_df DEFAULT 0,
    given_back INT NOT NULL CONSTRAINT portq_job_given_back_df DEFAULT 0;

-- migration: 10
-- When attempts started (django.tasks' started_at / last_attempted_at): every claim sets
-- started_at to the database clock (the latest attempt's start) and first_started_at once
-- (the first attempt's start); both stay after the job finishes. Nullable, without a
-- default: existing rows read NULL (docs/engines.md, "When each attempt started").
ALTER TABLE portq_job ADD
    started_at       DATETIME2(6) NULL,
    first_started_at DATETIME2(6) NULL;

-- migration: 11
-- Observability (docs/operations.md, "Middleware, tracing and progress"). meta: a small
-- JSON object of strings written with the job at enqueue (the enqueuer's trace context,
-- what enqueue hooks add), returned by the claim; ISJSON without a type argument accepts
-- an object (or array), which meta always is. progress, progress_note, progress_at: the
-- running attempt's last progress report (a fraction 0..1 or NULL, a short note of at most
-- 200 characters, 400 UTF-16 units, when it was written), written only by the claim that
-- owns the job (set_progress is fenced). Nullable columns without defaults: a metadata
-- change, no row is rewritten.
ALTER TABLE portq_job ADD
    meta          NVARCHAR(4000) NULL CONSTRAINT portq_job_meta_ck CHECK (ISJSON(meta) = 1),
    progress      FLOAT          NULL CONSTRAINT portq_job_progress_ck
                      CHECK (progress >= 0 AND progress <= 1),
    progress_note NVARCHAR(400)  NULL CONSTRAINT portq_job_progress_note_ck
                      CHECK (DATALENGTH(progress_note) <= 800),
    progress_at   DATETIME2(6)   NULL;

-- migration: 12
-- Job dependencies (enqueue(depends_on=[ids]); docs/operations.md, "Workflows"). A job
-- with unfinished dependencies is 'waiting', outside the filtered ready index: deps_left
-- counts them (> 0 exactly while waiting), decremented in the transaction that finishes
-- each one. dep_failure: 0 cancels the job when a dependency ends dead or cancelled, 1 runs
-- it anyway. has_dependents: 1 once a job became someone's dependency while unfinished, so
-- that a completion does the extra step only then. One portq_job_dep row per edge (job_id
-- waits on depends_on); resolved = 1 once depends_on's end was counted. Only job_id
-- cascades: a second cascading path from portq_job (depends_on) would be refused (1785).
-- NOT NULL columns with a constant default: a metadata change on 2012+ (Enterprise) or a
-- rewrite (Standard), as in migration 9.
ALTER TABLE portq_job DROP CONSTRAINT portq_job_state_ck;
ALTER TABLE portq_job DROP CONSTRAINT portq_job_finished_ck;
ALTER TABLE portq_job ADD
    deps_left      INT      NOT NULL CONSTRAINT portq_job_deps_left_df DEFAULT 0,
    has_dependents SMALLINT NOT NULL CONSTRAINT portq_job_has_dependents_df DEFAULT 0
                       CONSTRAINT portq_job_has_dependents_ck CHECK (has_dependents IN (0, 1)),
    dep_failure    SMALLINT NOT NULL CONSTRAINT portq_job_dep_failure_df DEFAULT 0
                       CONSTRAINT portq_job_dep_failure_ck CHECK (dep_failure IN (0, 1));
ALTER TABLE portq_job ADD
    CONSTRAINT portq_job_state_ck CHECK (state IN (N'ready', N'running', N'waiting',
                                                   N'succeeded', N'dead', N'cancelled')),
    CONSTRAINT portq_job_finished_ck CHECK (
        (state IN (N'succeeded', N'dead', N'cancelled') AND finished_at IS NOT NULL)
        OR (state IN (N'ready', N'running', N'waiting') AND finished_at IS NULL)),
    CONSTRAINT portq_job_deps_ck CHECK (
        (state = N'waiting' AND deps_left > 0) OR (state <> N'waiting' AND deps_left = 0));
CREATE TABLE portq_job_dep (
    job_id     BIGINT   NOT NULL CONSTRAINT portq_job_dep_job_fk
                   REFERENCES portq_job (job_id) ON DELETE CASCADE,
    depends_on BIGINT   NOT NULL,
    resolved   SMALLINT NOT NULL CONSTRAINT portq_job_dep_resolved_df DEFAULT 0
                   CONSTRAINT portq_job_dep_resolved_ck CHECK (resolved IN (0, 1)),
    CONSTRAINT portq_job_dep_pk PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX portq_job_dep_on_idx ON portq_job_dep (depends_on, resolved);
-- the jobs a transaction ended dead or cancelled while still someone's unresolved
-- dependency (SqlBackend.settle_dependencies): a filtered index of flagged rows
CREATE INDEX portq_job_unsettled_idx ON portq_job (job_id)
    WHERE has_dependents = 1 AND state IN (N'dead', N'cancelled');

-- migration: 13
-- Fair sharing across concurrency keys (Queue.set_fairness; docs/operations.md, "Fair
-- sharing across keys"). fair: claims of the queue take one job per key in turn;
-- fair_after: the key served last, VARBINARY as concurrency_key (NULL: the unkeyed jobs'
-- turn came last, a round starts at the smallest key). A fair claim update-locks the
-- queue's row, reads the cursor and walks this filtered index: the next key after the
-- cursor (one seek), then that key's first job in claim order (one seek); the INCLUDE
-- columns let the claim's filters run on the index entry.
ALTER TABLE portq_queue ADD
    fair       BIT             NOT NULL CONSTRAINT portq_queue_fair_df DEFAULT 0,
    fair_after VARBINARY(1020) NULL;
CREATE INDEX portq_job_fair_idx ON portq_job (queue, concurrency_key, priority DESC, run_at, job_id)
    INCLUDE (attempts, max_attempts, concurrency_limit) WHERE state = N'ready';
