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
