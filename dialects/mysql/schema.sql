-- portq schema for MySQL 8.0.16+ (8.4 LTS) and MariaDB 10.6+ (InnoDB, utf8mb4).
-- Times are DATETIME(6) in UTC, always computed in SQL with UTC_TIMESTAMP(6).
--
-- MySQL and MariaDB commit implicitly before and after every DDL statement, so a
-- migration is not atomic: each statement is written to be re-runnable (IF NOT EXISTS)
-- and indexes are declared inside CREATE TABLE (MySQL has no CREATE INDEX IF NOT EXISTS).
-- Concurrent migrate() calls are serialised with GET_LOCK (see queries.sql).

-- migration: 1
CREATE TABLE IF NOT EXISTS portq_job (
    job_id       BIGINT       NOT NULL AUTO_INCREMENT,
    queue        VARCHAR(128) NOT NULL,
    payload      JSON         NOT NULL,
    state        VARCHAR(16)  NOT NULL DEFAULT 'ready',
    priority     INT          NOT NULL DEFAULT 0,
    run_at       DATETIME(6)  NOT NULL,
    attempts     INT          NOT NULL DEFAULT 0,
    max_attempts INT          NOT NULL,
    -- VARBINARY, not VARCHAR: every PAD SPACE collation (utf8mb4_bin included) would
    -- make the keys 'a' and 'a ' collide in the unique index. 255 characters of utf8mb4
    -- are at most 1020 bytes, well under InnoDB's 3072-byte index key limit.
    job_key      VARBINARY(1020),
    worker_id    VARCHAR(255),
    lease_until  DATETIME(6),
    last_error   TEXT,
    created_at   DATETIME(6)  NOT NULL,
    finished_at  DATETIME(6),
    PRIMARY KEY (job_id),
    CONSTRAINT portq_job_key_uq UNIQUE (job_key),
    -- The claim walks this index in order for one queue (queue = ?, state = 'ready',
    -- ORDER BY priority DESC, run_at, job_id): there are no partial indexes, so state is
    -- the second key part. DESC is honoured by MySQL 8.0+ and MariaDB 10.8+.
    INDEX portq_job_ready_idx (queue, state, priority DESC, run_at, job_id),
    -- lease_until is set only while running, finished_at only in terminal states (the
    -- CHECKs below), so a range on either column reads just those rows, in order.
    INDEX portq_job_lease_idx (lease_until),
    INDEX portq_job_finished_idx (finished_at),
    CONSTRAINT portq_job_payload_ck CHECK (JSON_VALID(payload)),
    CONSTRAINT portq_job_state_ck CHECK (state IN ('ready', 'running', 'succeeded', 'dead', 'cancelled')),
    CONSTRAINT portq_job_running_ck CHECK (
        (state = 'running' AND worker_id IS NOT NULL AND lease_until IS NOT NULL)
        OR (state <> 'running' AND worker_id IS NULL AND lease_until IS NULL)),
    CONSTRAINT portq_job_finished_ck CHECK (
        (state IN ('succeeded', 'dead', 'cancelled') AND finished_at IS NOT NULL)
        OR (state IN ('ready', 'running') AND finished_at IS NULL)),
    CONSTRAINT portq_job_attempts_ck CHECK (attempts >= 0 AND attempts <= max_attempts),
    CONSTRAINT portq_job_max_attempts_ck CHECK (max_attempts > 0),
    CONSTRAINT portq_job_queue_ck CHECK (CHAR_LENGTH(queue) BETWEEN 1 AND 128),
    CONSTRAINT portq_job_key_ck CHECK (LENGTH(job_key) >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS portq_job_error (
    job_id     BIGINT       NOT NULL,
    attempt    INT          NOT NULL,
    worker_id  VARCHAR(255) NOT NULL,
    error      TEXT         NOT NULL,
    failed_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (job_id, attempt),
    CONSTRAINT portq_job_error_job_fk FOREIGN KEY (job_id) REFERENCES portq_job (job_id)
        ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- migration: 2
-- Identifiers compare exactly. utf8mb4_bin, like every PAD SPACE collation, compares
-- 'owner' and 'owner ' as equal: a fencing check by worker id "owner " matched a job
-- claimed by "owner", and queue "mail " was counted and claimed as "mail". Binary strings
-- compare byte by byte, all bytes significant (the NO PAD collations that would do the
-- same are named differently on MySQL and MariaDB; VARBINARY is the same on both). Reads
-- convert them back with CONVERT(... USING utf8mb4) (queries.sql).
-- Lengths are bytes now: queue names are ASCII (portq validates [A-Za-z0-9_.:-]{1,128}),
-- so portq_job_queue_ck's CHAR_LENGTH (which counts bytes in a binary string) still means
-- 1-128 characters; worker ids (up to 255 characters of utf8mb4, as VARCHAR(255) held)
-- take up to 1020 bytes; states are ASCII words. The named table CHECKs stay in force
-- (MODIFY keeps them on both engines) and every existing value keeps its bytes.
-- A state written with trailing spaces by other code passed version 1's CHECK (PAD SPACE)
-- and was read as that state; it is trimmed first, or the ALTER's re-check would refuse
-- it. Queue names are left as they are: one with trailing spaces becomes its own queue
-- (portq stats shows it; portq never writes one: names are validated).
-- Each statement is atomic and re-runnable, so a migration cut midway runs again cleanly.
UPDATE portq_job SET state = TRIM(TRAILING ' ' FROM state) WHERE state LIKE '% ';

ALTER TABLE portq_job
    MODIFY queue     VARBINARY(128)  NOT NULL,
    MODIFY state     VARBINARY(16)   NOT NULL DEFAULT 'ready',
    MODIFY worker_id VARBINARY(1020);

ALTER TABLE portq_job_error
    MODIFY worker_id VARBINARY(1020) NOT NULL;

-- migration: 3
-- The worker registry: each running worker keeps one row, renewed by its heartbeat
-- (expires_at = DB clock + ttl); a row whose heartbeats stopped expires and is deleted
-- by the next heartbeat of any worker. queues and schedules are JSON text.
CREATE TABLE IF NOT EXISTS portq_worker (
    worker_id    VARCHAR(200) NOT NULL,
    host         VARCHAR(255) NOT NULL,
    pid          INT          NOT NULL,
    queues       TEXT         NOT NULL,
    concurrency  INT          NOT NULL,
    jobs_in_hand INT          NOT NULL DEFAULT 0,
    schedules    MEDIUMTEXT   NOT NULL,
    started_at   DATETIME(6)  NOT NULL,
    heartbeat_at DATETIME(6)  NOT NULL,
    expires_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (worker_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- migration: 5
-- A succeeded job's return value (JSON), written by the worker in its own fenced
-- transaction just before the completion (see docs/operations.md, "Results"). Deleting the
-- job (prune) deletes its result (InnoDB foreign key).
CREATE TABLE IF NOT EXISTS portq_result (
    job_id     BIGINT      NOT NULL,
    generation INT         NOT NULL,
    result     JSON        NOT NULL,
    stored_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (job_id),
    CONSTRAINT portq_result_ck CHECK (JSON_VALID(result)),
    CONSTRAINT portq_result_job_fk FOREIGN KEY (job_id) REFERENCES portq_job (job_id)
        ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- migration: 6
-- Scoped uniqueness (Queue.enqueue(unique_for=, unique_states=, unique_per_queue=)): one
-- row per scoped key, the SHA-256 (hex) of the scope and key, naming the key's latest job.
-- An enqueue locks this row (FOR UPDATE), reads the job's state and age, and either
-- returns that job or inserts a new one and points the row at it. Deleting the job
-- (prune) deletes its row.
CREATE TABLE IF NOT EXISTS portq_job_unique (
    unique_hash CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    job_id      BIGINT,
    PRIMARY KEY (unique_hash),
    INDEX portq_job_unique_job_idx (job_id),
    CONSTRAINT portq_job_unique_job_fk FOREIGN KEY (job_id) REFERENCES portq_job (job_id)
        ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Per-queue flow control, one row per queue that has any: paused (claims of the queue
-- return nothing while 1; running jobs finish normally).
-- concurrency_limit: at most that many running jobs of the queue (a claim locks this row,
-- counts them through portq_job_ready_idx's (queue, state) prefix, claims the rest).
CREATE TABLE IF NOT EXISTS portq_queue (
    queue             VARCHAR(128) NOT NULL,
    paused            TINYINT      NOT NULL DEFAULT 0,
    concurrency_limit INT,
    updated_at        DATETIME(6)  NOT NULL,
    PRIMARY KEY (queue),
    CONSTRAINT portq_queue_paused_ck CHECK (paused IN (0, 1)),
    CONSTRAINT portq_queue_limit_ck CHECK (concurrency_limit > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- migration: 7
-- Rate limits (Queue.set_rate_limit): at most rate_limit jobs of the queue started per
-- rate_period_ms, over a sliding window. rate_log is a compact JSON list of
-- [db_epoch_ms, jobs] pairs, one per claim that started jobs within the last period (and
-- its guard; at most 64 entries): a claim of a rate-limited queue locks this row, reads the
-- DB clock, claims at most the limit minus the jobs logged in the window, and writes the
-- trimmed log back.
-- Each ALTER is one atomic statement; MysqlBackend.run_ddl treats "duplicate column" /
-- "duplicate key name" (1060/1061) as "this statement was applied by a run cut short".
ALTER TABLE portq_queue
    ADD COLUMN rate_limit     INT,
    ADD COLUMN rate_period_ms BIGINT,
    ADD COLUMN rate_log       TEXT,
    ADD CONSTRAINT portq_queue_rate_ck CHECK (rate_limit > 0 AND rate_period_ms > 0
        OR rate_limit IS NULL AND rate_period_ms IS NULL);
-- Per-key concurrency limits (enqueue(concurrency_key=, concurrency_limit=)): at most
-- concurrency_limit running jobs of the queue with that key. VARBINARY like job_key:
-- compared byte by byte, trailing spaces significant. No partial indexes here: the index
-- holds every row, keyed or not; the claim's count reads only (queue, key, 'running').
ALTER TABLE portq_job
    ADD COLUMN concurrency_key   VARBINARY(1020),
    ADD COLUMN concurrency_limit INT,
    ADD INDEX portq_job_ckey_idx (queue, concurrency_key, state),
    ADD CONSTRAINT portq_job_ckey_ck CHECK (
        concurrency_key IS NULL AND concurrency_limit IS NULL
        OR LENGTH(concurrency_key) >= 1 AND concurrency_limit > 0);

-- migration: 9
-- The worker runtime's per-job columns: timeout_ms, the longest one attempt may run
-- (enqueue(timeout=); NULL: the worker's job_timeout, if any); snoozes, how often a handler
-- rescheduled the job with portq.Snooze (which gives its attempt back, at most
-- MAX_SNOOZES times); given_back, how often a worker gave it back unstarted with its attempt
-- (release), bounded by its attempt budget so that a job is never claimed without end.
-- One atomic ALTER (MysqlBackend.run_ddl treats 1060, a duplicate column, as applied).
ALTER TABLE portq_job
    ADD COLUMN timeout_ms INT NULL,
    ADD COLUMN snoozes    INT NOT NULL DEFAULT 0,
    ADD COLUMN given_back INT NOT NULL DEFAULT 0,
    ADD CONSTRAINT portq_job_timeout_ck CHECK (timeout_ms > 0);

-- migration: 10
-- When attempts started (django.tasks' started_at / last_attempted_at): every claim sets
-- started_at to the database clock (the latest attempt's start) and first_started_at once
-- (the first attempt's start); both stay after the job finishes. One atomic ALTER (a run
-- cut short leaves 1060 "duplicate column", which MysqlBackend.run_ddl treats as applied).
ALTER TABLE portq_job
    ADD COLUMN started_at       DATETIME(6) NULL,
    ADD COLUMN first_started_at DATETIME(6) NULL;

-- migration: 11
-- Observability (docs/operations.md, "Middleware, tracing and progress"). meta: a small
-- JSON object of strings written with the job at enqueue (the enqueuer's trace context,
-- what enqueue hooks add), returned by the claim; TEXT with a JSON_VALID check, as
-- MariaDB stores JSON. progress, progress_note, progress_at: the running attempt's last
-- progress report (a fraction 0..1 or NULL, a short note, when it was written), written
-- only by the claim that owns the job (set_progress is fenced).
ALTER TABLE portq_job
    ADD COLUMN meta TEXT NULL,
    ADD COLUMN progress DOUBLE NULL,
    ADD COLUMN progress_note VARCHAR(200) NULL,
    ADD COLUMN progress_at DATETIME(6) NULL,
    ADD CONSTRAINT portq_job_meta_ck CHECK (JSON_VALID(meta) AND CHAR_LENGTH(meta) <= 4000),
    ADD CONSTRAINT portq_job_progress_ck CHECK (progress >= 0 AND progress <= 1);

-- migration: 12
-- Job dependencies (enqueue(depends_on=[ids]); docs/operations.md, "Workflows"). A job
-- with unfinished dependencies is 'waiting': the claim's index range (queue, 'ready', ...)
-- never reads it. deps_left counts them (> 0 exactly while waiting), decremented in the
-- transaction that finishes each one. dep_failure: 0 cancels the job when a dependency
-- ends dead or cancelled, 1 runs it anyway. has_dependents: 1 once a job became someone's
-- dependency while unfinished, so that a completion does the extra step only then. One
-- portq_job_dep row per edge (job_id waits on depends_on); resolved = 1 once depends_on's
-- end was counted. The ALTER is atomic: a migration cut short after it re-runs it, drops
-- the constraints it re-added, meets 1060 on the first column and is skipped (run_ddl).
ALTER TABLE portq_job
    DROP CONSTRAINT portq_job_state_ck,
    DROP CONSTRAINT portq_job_finished_ck,
    ADD COLUMN deps_left INT NOT NULL DEFAULT 0,
    ADD COLUMN has_dependents TINYINT NOT NULL DEFAULT 0,
    ADD COLUMN dep_failure TINYINT NOT NULL DEFAULT 0,
    -- the jobs a transaction ended dead or cancelled while still someone's unresolved
    -- dependency (SqlBackend.settle_dependencies): a range on has_dependents = 1
    ADD INDEX portq_job_unsettled_idx (has_dependents, state),
    ADD CONSTRAINT portq_job_state_ck
        CHECK (state IN ('ready', 'running', 'waiting', 'succeeded', 'dead', 'cancelled')),
    ADD CONSTRAINT portq_job_finished_ck CHECK (
        (state IN ('succeeded', 'dead', 'cancelled') AND finished_at IS NOT NULL)
        OR (state IN ('ready', 'running', 'waiting') AND finished_at IS NULL)),
    ADD CONSTRAINT portq_job_has_dependents_ck CHECK (has_dependents IN (0, 1)),
    ADD CONSTRAINT portq_job_dep_failure_ck CHECK (dep_failure IN (0, 1)),
    ADD CONSTRAINT portq_job_deps_ck CHECK (
        (state = 'waiting' AND deps_left > 0) OR (state <> 'waiting' AND deps_left = 0));
CREATE TABLE IF NOT EXISTS portq_job_dep (
    job_id     BIGINT  NOT NULL,
    depends_on BIGINT  NOT NULL,
    resolved   TINYINT NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, depends_on),
    INDEX portq_job_dep_on_idx (depends_on, resolved),
    CONSTRAINT portq_job_dep_resolved_ck CHECK (resolved IN (0, 1)),
    CONSTRAINT portq_job_dep_job_fk FOREIGN KEY (job_id) REFERENCES portq_job (job_id)
        ON DELETE CASCADE
) ENGINE = InnoDB;

-- migration: 13
-- Fair sharing across concurrency keys (Queue.set_fairness; docs/operations.md, "Fair
-- sharing across keys"). fair: claims of the queue take one job per key in turn;
-- fair_after: the key served last (NULL: the unkeyed jobs' turn came last, a round starts
-- at the smallest key). A fair claim locks the queue's row, reads the cursor and walks
-- portq_job_ckey_idx, made again as (queue, state, concurrency_key, priority DESC, run_at,
-- job_id): the next key after the cursor is one seek on (queue, 'ready', key > cursor),
-- that key's first job in claim order one seek more. The per-key running counts use the
-- (queue, 'running', key) prefix as before. No index is added: every claim already moved
-- each row's entry of the old (queue, concurrency_key, state) index, it moves this one.
-- Each ALTER is atomic: a rerun of the first meets 1060 (applied); the second reruns.
ALTER TABLE portq_queue
    ADD COLUMN fair       TINYINT NOT NULL DEFAULT 0,
    ADD COLUMN fair_after VARBINARY(1020),
    ADD CONSTRAINT portq_queue_fair_ck CHECK (fair IN (0, 1));
ALTER TABLE portq_job
    DROP INDEX portq_job_ckey_idx,
    ADD INDEX portq_job_ckey_idx (queue, state, concurrency_key, priority DESC, run_at, job_id);
