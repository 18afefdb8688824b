"""portq: background jobs in an ordinary SQL table, claimed safely by competing workers."""

from portq.errors import (
    ConfigurationError,
    ConnectionLost,
    DatabaseError,
    DriverMissingError,
    InvalidQueueName,
    PayloadError,
    Permanent,
    PortqError,
    SchemaError,
)
from portq.job import Claim, Job, JobRecord, QueueStats, State
from portq.queue import Queue, connect
from portq.retry import Backoff
from portq.tasks import Task, current_job, task
from portq.worker import RetryAfter, Worker

__all__ = [
    "Backoff", "Claim", "ConfigurationError", "ConnectionLost", "DatabaseError",
    "DriverMissingError", "InvalidQueueName", "Job", "JobRecord", "PayloadError", "Permanent",
    "PortqError", "Queue", "QueueStats", "RetryAfter", "SchemaError", "State", "Task", "Worker",
    "connect", "current_job", "task",
]
__version__ = "0.1.0"
