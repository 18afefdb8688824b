"""Exceptions raised by portq. Every message names the problem and never a password.

``exit_code`` is the status the ``portq`` command exits with when the error reaches it:
2 for a mistake the user can fix (URL, option, login, missing schema, bad input), 1 for a
failure at run time (a lost connection, a lock held too long, an unexpected database error).
"""

from __future__ import annotations


class PortqError(Exception):
    """Base class of every portq error."""

    exit_code = 1


class ConfigurationError(PortqError, ValueError):
    """A URL, option or argument is invalid."""

    exit_code = 2


class DriverMissingError(ConfigurationError, ImportError):
    """The database driver for an engine is not installed, or cannot load (a system
    library it needs is missing)."""


class PayloadError(PortqError, ValueError):
    """A payload cannot be stored (not JSON-serialisable, too large, nested too deeply, or
    holding a NUL character)."""

    exit_code = 2


class InvalidQueueName(ConfigurationError):
    """A queue name does not match ``[A-Za-z0-9_.:-]{1,128}``."""


class DatabaseError(PortqError):
    """The database failed in a way portq could not retry or recover from."""


class ConnectionLost(DatabaseError):
    """The connection to the database dropped; the operation may be retried."""


class CannotConnect(ConnectionLost):
    """No connection could be opened (server unreachable, login refused, no such
    database): the URL is the first thing to check."""

    exit_code = 2


class LoginFailed(CannotConnect, ConfigurationError):
    """The server refused the user name or password."""


class DatabaseMissing(CannotConnect, ConfigurationError):
    """The database named in the URL does not exist on the server."""


class StatementTimeout(DatabaseError):
    """The database stopped a statement that ran longer than the connection's
    ``statement_timeout_ms`` (an option of :func:`portq.connect`; the dashboard sets it)."""


class DatabaseBusy(DatabaseError):
    """A lock stayed held by another transaction longer than portq was configured to
    wait (e.g. SQLite's ``busy_timeout_ms``), retries included."""


class SchemaError(DatabaseError, ConfigurationError):
    """The schema is missing or not at this portq's version; run ``portq migrate``."""

    exit_code = 2


class SchemaMissingError(SchemaError):
    """portq's tables do not exist in the database (it was never migrated)."""


class Permanent(Exception):
    """Raise from a handler to send the job to ``dead`` at once, without retries."""


class JobCancelled(Exception):
    """Raised by :meth:`portq.Job.raise_if_cancelled` once an operator cancelled the job
    (``portq cancel``, ``Queue.cancel``): the job is ``cancelled`` whatever its handler
    does next, so a handler may let this propagate to stop early."""


class ResultError(PayloadError, Permanent):
    """A handler's return value cannot be stored as its result (not JSON, or too large);
    the job goes to ``dead`` with this message."""


class JobTimeout(Exception):
    """The attempt ran longer than its job's timeout (``enqueue(timeout=)``, a task's
    ``timeout``, or the worker's ``job_timeout``): it fails with this error and is retried
    by the usual policy. Its handler is told (``job.cancelled()`` is true; an async
    handler's task is cancelled) and whatever it does later is not recorded."""
