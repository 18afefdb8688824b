"""portq: background jobs in an ordinary SQL table, claimed safely by competing workers."""

from portq.errors import (
    CannotConnect,
    ConfigurationError,
    ConnectionLost,
    DatabaseBusy,
    DatabaseError,
    DatabaseMissing,
    DriverMissingError,
    InvalidQueueName,
    JobCancelled,
    JobTimeout,
    LoginFailed,
    PayloadError,
    Permanent,
    PortqError,
    ResultError,
    SchemaError,
    SchemaMissingError,
    StatementTimeout,
)
from portq.hooks import Enqueueing
from portq.job import Claim, Job, JobRecord, QueueStats, State
from portq.queue import Queue, connect
from portq.retry import Backoff
from portq.runtime.execution import Snooze
from portq.stats import JobStats
from portq.tasks import Task, current_job, task
from portq.worker import RetryAfter, Worker

__all__ = [
    "Backoff",
    "CannotConnect",
    "Claim",
    "ConfigurationError",
    "ConnectionLost",
    "DatabaseBusy",
    "DatabaseError",
    "DatabaseMissing",
    "DriverMissingError",
    "Enqueueing",
    "InvalidQueueName",
    "Job",
    "JobCancelled",
    "JobRecord",
    "JobStats",
    "JobTimeout",
    "LoginFailed",
    "PayloadError",
    "Permanent",
    "PortqError",
    "Queue",
    "QueueStats",
    "ResultError",
    "RetryAfter",
    "SchemaError",
    "SchemaMissingError",
    "Snooze",
    "State",
    "StatementTimeout",
    "Task",
    "Worker",
    "connect",
    "current_job",
    "task",
]
__version__ = "0.1.0"
