"""Exceptions raised by portq. Every message names the problem and never a password."""

from __future__ import annotations


class PortqError(Exception):
    """Base class of every portq error."""


class ConfigurationError(PortqError, ValueError):
    """A URL, option or argument is invalid."""


class DriverMissingError(ConfigurationError, ImportError):
    """The database driver for an engine is not installed."""


class PayloadError(PortqError, ValueError):
    """A payload cannot be stored as JSON (not serialisable, or too large)."""


class InvalidQueueName(ConfigurationError):
    """A queue name does not match ``[A-Za-z0-9_.:-]{1,128}``."""


class DatabaseError(PortqError):
    """The database failed in a way portq could not retry or recover from."""


class ConnectionLost(DatabaseError):
    """The connection to the database dropped; the operation may be retried."""


class SchemaError(DatabaseError):
    """The schema is missing or newer than this portq understands; run ``portq migrate``."""


class Permanent(Exception):
    """Raise from a handler to send the job to ``dead`` at once, without retries."""


class ResultError(PayloadError, Permanent):
    """A handler's return value cannot be stored as its result (not JSON, or too large);
    the job goes to ``dead`` with this message."""
