-- portq schema for SQLite 3.35+ (stdlib sqlite3).
-- Times are INTEGER microseconds since the Unix epoch (UTC), always computed in SQL as
--   CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
-- so that deadlines follow the database clock, never a worker's.

-- migration: 1
CREATE TABLE portq_job (
    job_id       INTEGER PRIMARY KEY AUTOINCREMENT,
    queue        TEXT    NOT NULL,
    payload      TEXT    NOT NULL CHECK (json_valid(payload)),
    state        TEXT    NOT NULL DEFAULT 'ready',
    priority     INTEGER NOT NULL DEFAULT 0,
    run_at       INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    job_key      TEXT    UNIQUE,
    worker_id    TEXT,
    lease_until  INTEGER,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    CONSTRAINT portq_job_state_ck CHECK (state IN ('ready', 'running', 'succeeded', 'dead', 'cancelled')),
    CONSTRAINT portq_job_running_ck CHECK (
        (state = 'running' AND worker_id IS NOT NULL AND lease_until IS NOT NULL)
        OR (state <> 'running' AND worker_id IS NULL AND lease_until IS NULL)),
    CONSTRAINT portq_job_finished_ck CHECK (
        (state IN ('succeeded', 'dead', 'cancelled') AND finished_at IS NOT NULL)
        OR (state IN ('ready', 'running') AND finished_at IS NULL)),
    CONSTRAINT portq_job_attempts_ck CHECK (attempts >= 0 AND attempts <= max_attempts),
    CONSTRAINT portq_job_max_attempts_ck CHECK (max_attempts > 0),
    CONSTRAINT portq_job_queue_ck CHECK (length(queue) BETWEEN 1 AND 128)
);

-- The claim walks this index in order for one queue: a partial index of ready rows.
CREATE INDEX portq_job_ready_idx ON portq_job (queue, priority DESC, run_at, job_id)
    WHERE state = 'ready';
CREATE INDEX portq_job_lease_idx ON portq_job (lease_until) WHERE state = 'running';
CREATE INDEX portq_job_finished_idx ON portq_job (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');

CREATE TABLE portq_job_error (
    job_id     INTEGER NOT NULL REFERENCES portq_job (job_id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    worker_id  TEXT    NOT NULL,
    error      TEXT    NOT NULL,
    failed_at  INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt)
);

-- migration: 3
-- The worker registry: each running worker keeps one row, renewed by its heartbeat
-- (expires_at = DB clock + ttl); a row whose heartbeats stopped expires and is deleted
-- by the next heartbeat of any worker. queues and schedules are JSON text.
CREATE TABLE portq_worker (
    worker_id    TEXT    PRIMARY KEY,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT    NOT NULL,
    concurrency  INTEGER NOT NULL,
    jobs_in_hand INTEGER NOT NULL DEFAULT 0,
    schedules    TEXT    NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);

-- migration: 5
-- A succeeded job's return value (JSON), written by the worker in its own fenced
-- transaction just before the completion (see docs/operations.md, "Results"). Deleting the
-- job (prune) deletes its result: portq's connections run with PRAGMA foreign_keys = ON.
CREATE TABLE portq_result (
    job_id     INTEGER PRIMARY KEY REFERENCES portq_job (job_id) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    result     TEXT    NOT NULL CHECK (json_valid(result)),
    stored_at  INTEGER NOT NULL
);

-- migration: 6
-- Scoped uniqueness (Queue.enqueue(unique_for=, unique_states=, unique_per_queue=)): one
-- row per scoped key, the SHA-256 (hex) of the scope and key, naming the key's latest job.
-- An enqueue locks this row (the write lock, here), reads the job's state and age, and
-- either returns that job or inserts a new one and points the row at it. Deleting the job
-- (prune) deletes its row: portq's connections run with PRAGMA foreign_keys = ON.
CREATE TABLE portq_job_unique (
    unique_hash TEXT    PRIMARY KEY CHECK (length(unique_hash) = 64),
    job_id      INTEGER REFERENCES portq_job (job_id) ON DELETE CASCADE
);
CREATE INDEX portq_job_unique_job_idx ON portq_job_unique (job_id);

-- Per-queue flow control, one row per queue that has any: paused (claims of the queue
-- return nothing while 1; running jobs finish normally); concurrency_limit (at most that
-- many running jobs of the queue: a claim locks this row, counts them, claims the rest).
CREATE TABLE portq_queue (
    queue             TEXT    PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
    paused            INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    concurrency_limit INTEGER CHECK (concurrency_limit > 0),
    updated_at        INTEGER NOT NULL
);
-- counts a queue's running jobs (bounded by its limit) for the claim
CREATE INDEX portq_job_running_idx ON portq_job (queue) WHERE state = 'running';

-- migration: 7
-- Rate limits (Queue.set_rate_limit): at most rate_limit jobs of the queue started per
-- rate_period_ms, over a sliding window. rate_log is a compact JSON list of
-- [db_epoch_ms, jobs] pairs, one per claim that started jobs within the last period (and
-- its guard): a claim of a rate-limited queue (holding the write lock) reads the clock,
-- claims at most the limit minus the jobs logged in the window, and writes the log back.
ALTER TABLE portq_queue ADD COLUMN rate_limit INTEGER CHECK (rate_limit > 0);
ALTER TABLE portq_queue ADD COLUMN rate_period_ms INTEGER CHECK (rate_period_ms > 0);
ALTER TABLE portq_queue ADD COLUMN rate_log TEXT;
-- Per-key concurrency limits (enqueue(concurrency_key=, concurrency_limit=)): at most
-- concurrency_limit running jobs of the queue with that key. Compared exactly (BINARY).
ALTER TABLE portq_job ADD COLUMN concurrency_key TEXT
    CHECK (length(concurrency_key) BETWEEN 1 AND 255);
ALTER TABLE portq_job ADD COLUMN concurrency_limit INTEGER
    CHECK ((concurrency_key IS NULL AND concurrency_limit IS NULL)
           OR (concurrency_key IS NOT NULL AND concurrency_limit > 0));
-- counts a key's running jobs for the claim's row filter and its recount
CREATE INDEX portq_job_ckey_idx ON portq_job (queue, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;

-- migration: 9
-- The worker runtime's per-job columns: timeout_ms, the longest one attempt may run
-- (enqueue(timeout=); NULL: the worker's job_timeout, if any); snoozes, how often a handler
-- rescheduled the job with portq.Snooze (which gives its attempt back, at most
-- MAX_SNOOZES times); given_back, how often a worker gave it back unstarted with its attempt
-- (release), bounded by its attempt budget so that a job is never claimed without end.
ALTER TABLE portq_job ADD COLUMN timeout_ms INTEGER CHECK (timeout_ms > 0);
ALTER TABLE portq_job ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE portq_job ADD COLUMN given_back INTEGER NOT NULL DEFAULT 0;

-- migration: 10
-- When attempts started (django.tasks' started_at / last_attempted_at): every claim sets
-- started_at to the database clock (the latest attempt's start) and first_started_at once
-- (the first attempt's start); both stay after the job finishes.
ALTER TABLE portq_job ADD COLUMN started_at INTEGER;
ALTER TABLE portq_job ADD COLUMN first_started_at INTEGER;

-- migration: 11
-- Observability (docs/operations.md, "Middleware, tracing and progress"). meta: a small
-- JSON object of strings written with the job at enqueue (the enqueuer's trace context,
-- what enqueue hooks add), returned by the claim. progress, progress_note, progress_at:
-- the running attempt's last progress report (a fraction 0..1 or NULL, a short note, when
-- it was written), written only by the claim that owns the job (set_progress is fenced).
ALTER TABLE portq_job ADD COLUMN meta TEXT
    CHECK (json_type(meta) = 'object' AND length(meta) <= 4000);
ALTER TABLE portq_job ADD COLUMN progress REAL CHECK (progress >= 0 AND progress <= 1);
ALTER TABLE portq_job ADD COLUMN progress_note TEXT CHECK (length(progress_note) <= 200);
ALTER TABLE portq_job ADD COLUMN progress_at INTEGER;

-- migration: 12
-- Job dependencies (enqueue(depends_on=[ids]); docs/operations.md, "Workflows"). A job
-- with unfinished dependencies is 'waiting', outside the ready index: deps_left counts
-- them (> 0 exactly while waiting), decremented in the transaction that finishes each one.
-- dep_failure: 0 cancels the job when a dependency ends dead or cancelled, 1 runs it
-- anyway. has_dependents: 1 once a job became someone's dependency while unfinished, so
-- that a completion does the extra step only then. One portq_job_dep row per edge
-- (job_id waits on depends_on); resolved = 1 once depends_on's end was counted.
-- The state CHECKs gain 'waiting': SQLite cannot alter a constraint, and rebuilding the
-- table would cascade-delete results through the foreign keys, so the table's stored SQL
-- is rewritten (the documented writable_schema procedure, for a constraint that only
-- widens; SqliteBackend.run_ddl bumps schema_version after it).
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(replace(sql,
    'state IN (''ready'', ''running'', ''succeeded'', ''dead'', ''cancelled'')',
    'state IN (''ready'', ''running'', ''waiting'', ''succeeded'', ''dead'', ''cancelled'')'),
    'state IN (''ready'', ''running'') AND finished_at IS NULL',
    'state IN (''ready'', ''running'', ''waiting'') AND finished_at IS NULL')
WHERE type = 'table' AND name = 'portq_job';
PRAGMA writable_schema = OFF;
ALTER TABLE portq_job ADD COLUMN deps_left INTEGER NOT NULL DEFAULT 0
    CHECK ((state = 'waiting' AND deps_left > 0) OR (state <> 'waiting' AND deps_left = 0));
ALTER TABLE portq_job ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0
    CHECK (has_dependents IN (0, 1));
ALTER TABLE portq_job ADD COLUMN dep_failure INTEGER NOT NULL DEFAULT 0
    CHECK (dep_failure IN (0, 1));
CREATE TABLE portq_job_dep (
    job_id     INTEGER NOT NULL REFERENCES portq_job (job_id) ON DELETE CASCADE,
    depends_on INTEGER NOT NULL,
    resolved   INTEGER NOT NULL DEFAULT 0 CHECK (resolved IN (0, 1)),
    PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX portq_job_dep_on_idx ON portq_job_dep (depends_on, resolved);
-- the jobs a transaction ended dead or cancelled while still someone's unresolved
-- dependency (SqlBackend.settle_dependencies): flagged rows only, so it stays near-empty
CREATE INDEX portq_job_unsettled_idx ON portq_job (job_id)
    WHERE has_dependents = 1 AND state IN ('dead', 'cancelled');

-- migration: 13
-- Fair sharing across concurrency keys (Queue.set_fairness; docs/operations.md, "Fair
-- sharing across keys"). fair: claims of the queue take one job per key in turn;
-- fair_after: the key served last (NULL: the unkeyed jobs' turn came last, a round starts
-- at the smallest key). A fair claim (holding the write lock) reads the cursor and walks
-- this partial index: the next key after the cursor (one seek), then that key's first job
-- in claim order (one seek).
ALTER TABLE portq_queue ADD COLUMN fair INTEGER NOT NULL DEFAULT 0 CHECK (fair IN (0, 1));
ALTER TABLE portq_queue ADD COLUMN fair_after TEXT;
CREATE INDEX portq_job_fair_idx ON portq_job (queue, concurrency_key, priority DESC, run_at, job_id)
    WHERE state = 'ready';
