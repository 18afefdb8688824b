-- portq schema for PostgreSQL 13+.

-- migration: 1
CREATE TABLE portq_job (
    job_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    state        text        NOT NULL DEFAULT 'ready',
    priority     integer     NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL,
    job_key      text        UNIQUE,
    worker_id    text,
    lease_until  timestamptz,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
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

-- The claim walks this partial index in order, for one queue at a time (queue = $1;
-- never queue = ANY($1), which turns the walk into a bitmap scan and a sort).
CREATE INDEX portq_job_ready_idx ON portq_job (queue, priority DESC, run_at, job_id)
    WHERE state = 'ready';
CREATE INDEX portq_job_lease_idx ON portq_job (lease_until) WHERE state = 'running';
CREATE INDEX portq_job_finished_idx ON portq_job (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');

CREATE TABLE portq_job_error (
    job_id     bigint      NOT NULL REFERENCES portq_job (job_id) ON DELETE CASCADE,
    attempt    integer     NOT NULL,
    worker_id  text        NOT NULL,
    error      text        NOT NULL,
    failed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, attempt)
);

-- migration: 3
-- The worker registry: each running worker keeps one row, renewed by its heartbeat
-- (expires_at = DB clock + ttl); a row whose heartbeats stopped expires and is deleted
-- by the next heartbeat of any worker. queues and schedules are JSON text.
CREATE TABLE portq_worker (
    worker_id    text        PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text        NOT NULL,
    concurrency  integer     NOT NULL,
    jobs_in_hand integer     NOT NULL DEFAULT 0,
    schedules    text        NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- migration: 5
-- A succeeded job's return value (JSON), written by the worker in its own fenced
-- transaction just before the completion (see docs/operations.md, "Results"). Deleting the
-- job (prune) deletes its result.
CREATE TABLE portq_result (
    job_id     bigint      PRIMARY KEY REFERENCES portq_job (job_id) ON DELETE CASCADE,
    generation integer     NOT NULL,
    result     jsonb       NOT NULL,
    stored_at  timestamptz NOT NULL DEFAULT now()
);

-- migration: 6
-- Scoped uniqueness (Queue.enqueue(unique_for=, unique_states=, unique_per_queue=)): one
-- row per scoped key, the SHA-256 (hex) of the scope and key, naming the key's latest job.
-- An enqueue locks this row (FOR UPDATE), reads the job's state and age, and either
-- returns that job or inserts a new one and points the row at it. Deleting the job
-- (prune) deletes its row.
CREATE TABLE portq_job_unique (
    unique_hash text   PRIMARY KEY CHECK (length(unique_hash) = 64),
    job_id      bigint REFERENCES portq_job (job_id) ON DELETE CASCADE
);
CREATE INDEX portq_job_unique_job_idx ON portq_job_unique (job_id);

-- Per-queue flow control, one row per queue that has any: paused (claims of the queue
-- return nothing while true; running jobs finish normally).
-- concurrency_limit: at most that many running jobs of the queue (a claim locks this row,
-- counts them, claims the rest).
CREATE TABLE portq_queue (
    queue             text        PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
    paused            boolean     NOT NULL DEFAULT false,
    concurrency_limit integer     CHECK (concurrency_limit > 0),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- counts a queue's running jobs (bounded by its limit) for the claim
CREATE INDEX portq_job_running_idx ON portq_job (queue) WHERE state = 'running';

-- migration: 7
-- Rate limits (Queue.set_rate_limit): at most rate_limit jobs of the queue started per
-- rate_period_ms, over a sliding window. rate_log is a compact JSON list of
-- [db_epoch_ms, jobs] pairs, one per claim that started jobs within the last period (and
-- its guard): a claim of a rate-limited queue locks this row, reads the DB clock, claims at
-- most the limit minus the jobs logged in the window, and writes the trimmed log back.
ALTER TABLE portq_queue
    ADD COLUMN rate_limit     integer CHECK (rate_limit > 0),
    ADD COLUMN rate_period_ms bigint  CHECK (rate_period_ms > 0),
    ADD COLUMN rate_log       text,
    ADD CONSTRAINT portq_queue_rate_ck CHECK ((rate_limit IS NULL) = (rate_period_ms IS NULL));
-- Per-key concurrency limits (enqueue(concurrency_key=, concurrency_limit=)): at most
-- concurrency_limit running jobs of the queue with that key. Compared exactly (text).
ALTER TABLE portq_job
    ADD COLUMN concurrency_key   text CHECK (length(concurrency_key) BETWEEN 1 AND 255),
    ADD COLUMN concurrency_limit integer,
    ADD CONSTRAINT portq_job_ckey_ck CHECK (
        (concurrency_key IS NULL AND concurrency_limit IS NULL)
        OR (concurrency_key IS NOT NULL AND concurrency_limit > 0));
-- counts a key's running jobs for the claim's row filter and its recount (running, keyed
-- rows only: a few entries per key)
CREATE INDEX portq_job_ckey_idx ON portq_job (queue, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;

-- migration: 9
-- The worker runtime's per-job columns: timeout_ms, the longest one attempt may run
-- (enqueue(timeout=); NULL: the worker's job_timeout, if any); snoozes, how often a handler
-- rescheduled the job with portq.Snooze (which gives its attempt back, at most
-- MAX_SNOOZES times); given_back, how often a worker gave it back unstarted with its attempt
-- (release), bounded by its attempt budget so that a job is never claimed without end.
ALTER TABLE portq_job
    ADD COLUMN timeout_ms integer CONSTRAINT portq_job_timeout_ck CHECK (timeout_ms > 0),
    ADD COLUMN snoozes    integer NOT NULL DEFAULT 0,
    ADD COLUMN given_back integer NOT NULL DEFAULT 0;

-- migration: 10
-- When attempts started (django.tasks' started_at / last_attempted_at): every claim sets
-- started_at to the database clock (the latest attempt's start) and first_started_at once
-- (the first attempt's start); both stay after the job finishes. Nullable columns without
-- a default: adding them rewrites nothing.
ALTER TABLE portq_job
    ADD COLUMN started_at       timestamptz,
    ADD COLUMN first_started_at timestamptz;

-- migration: 11
-- Observability (docs/operations.md, "Middleware, tracing and progress"). meta: a small
-- JSON object of strings written with the job at enqueue (the enqueuer's trace context,
-- what enqueue hooks add), returned by the claim. progress, progress_note, progress_at:
-- the running attempt's last progress report (a fraction 0..1 or NULL, a short note, when
-- it was written), written only by the claim that owns the job (set_progress is fenced).
-- Adding nullable columns without defaults rewrites no row.
ALTER TABLE portq_job
    ADD COLUMN meta jsonb CONSTRAINT portq_job_meta_ck
        CHECK (jsonb_typeof(meta) = 'object' AND octet_length(meta::text) <= 4000),
    ADD COLUMN progress double precision CONSTRAINT portq_job_progress_ck
        CHECK (progress >= 0 AND progress <= 1),
    ADD COLUMN progress_note text CONSTRAINT portq_job_progress_note_ck
        CHECK (char_length(progress_note) <= 200),
    ADD COLUMN progress_at timestamptz;

-- migration: 12
-- Job dependencies (enqueue(depends_on=[ids]); docs/operations.md, "Workflows"). A job
-- with unfinished dependencies is 'waiting', outside the partial ready index: deps_left
-- counts them (> 0 exactly while waiting), decremented in the transaction that finishes
-- each one. dep_failure: 0 cancels the job when a dependency ends dead or cancelled, 1 runs
-- it anyway. has_dependents: 1 once a job became someone's dependency while unfinished, so
-- that a completion does the extra step only then. One portq_job_dep row per edge (job_id
-- waits on depends_on); resolved = 1 once depends_on's end was counted. New columns with
-- constant defaults rewrite no row; the widened state CHECKs are validated once.
ALTER TABLE portq_job
    DROP CONSTRAINT portq_job_state_ck,
    DROP CONSTRAINT portq_job_finished_ck,
    ADD CONSTRAINT portq_job_state_ck
        CHECK (state IN ('ready', 'running', 'waiting', 'succeeded', 'dead', 'cancelled')),
    ADD CONSTRAINT portq_job_finished_ck CHECK (
        (state IN ('succeeded', 'dead', 'cancelled') AND finished_at IS NOT NULL)
        OR (state IN ('ready', 'running', 'waiting') AND finished_at IS NULL)),
    ADD COLUMN deps_left integer NOT NULL DEFAULT 0,
    ADD COLUMN has_dependents smallint NOT NULL DEFAULT 0
        CONSTRAINT portq_job_has_dependents_ck CHECK (has_dependents IN (0, 1)),
    ADD COLUMN dep_failure smallint NOT NULL DEFAULT 0
        CONSTRAINT portq_job_dep_failure_ck CHECK (dep_failure IN (0, 1)),
    ADD CONSTRAINT portq_job_deps_ck CHECK (
        (state = 'waiting' AND deps_left > 0) OR (state <> 'waiting' AND deps_left = 0));
CREATE TABLE portq_job_dep (
    job_id     bigint   NOT NULL REFERENCES portq_job (job_id) ON DELETE CASCADE,
    depends_on bigint   NOT NULL,
    resolved   smallint NOT NULL DEFAULT 0 CONSTRAINT portq_job_dep_resolved_ck
                   CHECK (resolved IN (0, 1)),
    PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX portq_job_dep_on_idx ON portq_job_dep (depends_on, resolved);
-- the jobs a transaction ended dead or cancelled while still someone's unresolved
-- dependency (SqlBackend.settle_dependencies): flagged rows only, so it stays near-empty
CREATE INDEX portq_job_unsettled_idx ON portq_job (job_id)
    WHERE has_dependents = 1 AND state IN ('dead', 'cancelled');

-- migration: 13
-- Fair sharing across concurrency keys (Queue.set_fairness; docs/operations.md, "Fair
-- sharing across keys"). fair: claims of the queue take one job per key in turn; fair_after:
-- the key served last (NULL: the turn of the unkeyed jobs came last, a round starts at the
-- smallest key). A fair claim locks the queue's row, reads the cursor, and walks this
-- index: the next key after the cursor (one seek), then that key's first job in claim
-- order (one seek). Ready rows only: a claim's UPDATE adds no entry to it. Its predicate
-- also says job_id > 0 (true of every row), which only the fair statements state: the plain
-- claim cannot use this index, so no statistics can make it walk it and sort (PostgreSQL
-- 18 did, with stale statistics, instead of walking portq_job_ready_idx in order).
ALTER TABLE portq_queue
    ADD COLUMN fair       boolean NOT NULL DEFAULT false,
    ADD COLUMN fair_after text;
CREATE INDEX portq_job_fair_idx ON portq_job (queue, concurrency_key, priority DESC, run_at, job_id)
    WHERE state = 'ready' AND job_id > 0;
