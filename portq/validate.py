"""Validation of what the public API takes, before anything reaches the database: queue
names, worker ids, keys, integers, priorities, durations, uniqueness scopes, per-key
limits, and JSON payloads and results every engine can store. :mod:`portq.queue`
re-exports every name (older imports keep working)."""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from portq.errors import ConfigurationError, InvalidQueueName, PayloadError
from portq.job import State
from portq.protocol import UniqueScope

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
MAX_KEY_LENGTH = 255
INT32 = 2**31 - 1
#: the deepest nesting of arrays/objects a payload may have, on every engine: MariaDB's
#: JSON_VALID refuses 32 levels (MySQL 8.4 allows 100, SQL Server 128, PostgreSQL and
#: SQLite more), so the common limit is 31
MAX_PAYLOAD_DEPTH = 31
# an escaped NUL (\u0000) in JSON text: preceded by an even number of backslashes
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
#: one encoder for every payload and result: ``json.dumps`` with options builds a new
#: encoder per call, a third of the time of a small payload's dump
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


#: the most characters of a refused value an error message shows
SHOWN_CHARS = 60


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut to :data:`SHOWN_CHARS` characters with
    the full length given (a 5,000-character key is named, not printed)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    size = f" ({len(value):,} characters)" if isinstance(value, str) else ""
    return f"{text[:SHOWN_CHARS - 1]}…{size}"


def validate_queue(name: str) -> str:
    """Return ``name`` if it is 1-128 characters of ``[A-Za-z0-9_.:-]``."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidQueueName(
            f"invalid queue name {shown(name)}: use 1-128 characters of letters, digits, "
            "'_', '.', ':' and '-'")
    return name


def validate_worker_id(worker_id: str) -> str:
    """Return ``worker_id`` if it is a string of 1-200 characters every engine stores."""
    if not isinstance(worker_id, str) or not 1 <= len(worker_id) <= 200:
        raise ConfigurationError("worker_id must be a string of 1-200 characters")
    if not _storable_text(worker_id):
        raise ConfigurationError(f"worker_id {shown(worker_id)} holds a NUL character or a lone "
                                 "surrogate, which not every database can store")
    return worker_id


def validate_key(key: str) -> str:
    """Return ``key`` if it is 1-255 characters every engine can store."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise ConfigurationError(f"key must be a non-empty string of at most "
                                 f"{MAX_KEY_LENGTH} characters (Oracle stores '' as NULL), "
                                 f"got {shown(key)}")
    if not _storable_text(key):
        raise ConfigurationError(f"key {shown(key)} holds a NUL character or a lone surrogate, "
                                 "which not every database can store")
    return key


def positive_int(value: Any, what: str, *, allow_zero: bool = False) -> int:
    """``value`` as an int that is > 0 (or >= 0), else a :class:`ConfigurationError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an integer, got {shown(value)}")
    if value < 0 or (value == 0 and not allow_zero) or value > INT32:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(f"{what} must be {bound} and <= {INT32}, got {value}")
    return value


def validate_priority(priority: Any) -> int:
    """Return ``priority`` if it is an integer in 32-bit range (higher runs first)."""
    if isinstance(priority, bool) or not isinstance(priority, int) or \
            not -INT32 <= priority <= INT32:
        raise ConfigurationError(f"priority must be an integer in 32-bit range, "
                                 f"got {shown(priority)}")
    return priority


#: what other job libraries call some of :meth:`Queue.enqueue`'s options
SYNONYMS = {"retries": "max_attempts", "max_retries": "max_attempts", "eta": "run_at",
            "countdown": "delay", "unique_key": "key", "idempotency_key": "key"}


def concurrency_options(key: Any, limit: Any) -> tuple[str | None, int | None]:
    """A validated per-key concurrency limit: both given (a key as :func:`validate_key`
    accepts, a limit of at least 1) or neither."""
    if key is None and limit is None:
        return None, None
    if key is None:
        raise ConfigurationError("concurrency_limit limits the jobs of one concurrency_key: "
                                 "give concurrency_key too")
    if limit is None:
        raise ConfigurationError(f"concurrency_key {shown(key)} needs concurrency_limit (the "
                                 "most running jobs of that key, at least 1)")
    try:
        validate_key(key)
    except ConfigurationError as exc:
        raise ConfigurationError(f"concurrency_key: {exc}") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= INT32:
        raise ConfigurationError(f"concurrency_limit must be an integer of at least 1, "
                                 f"got {shown(limit)}")
    return key, limit


def unique_scope(queue: str, key: str | None, *, unique_per_queue: bool = False,
                 unique_for: float | timedelta | None = None,
                 unique_states: Sequence[str] | None = None) -> UniqueScope | None:
    """The scope of a scoped ``key`` (None when no scope is asked for). The key is unique
    among the jobs of ``queue`` with ``unique_per_queue`` (else of every queue), and an
    existing job of it counts only while younger than ``unique_for`` seconds and in one
    of ``unique_states``; otherwise the enqueue creates a new job. A scoped key lives
    apart from plain keys and is not the job's ``key`` (which stays None)."""
    if not unique_per_queue and unique_for is None and unique_states is None:
        return None
    if key is None:
        raise ConfigurationError("unique_per_queue, unique_for and unique_states scope a key: "
                                 "give key= too")
    if not isinstance(unique_per_queue, bool):
        raise ConfigurationError(f"unique_per_queue must be True or False, "
                                 f"got {shown(unique_per_queue)}")
    period_ms = None if unique_for is None else given_ms(unique_for, "unique_for")
    states: tuple[str, ...] | None = None
    if unique_states is not None:
        names = [unique_states] if isinstance(unique_states, str) else list(unique_states)
        bad = [s for s in names if s not in set(State)]
        if bad or not names:
            raise ConfigurationError(f"unique_states must be some of "
                                     f"{', '.join(State)}; got {shown(names)}")
        states = tuple(sorted(set(names)))
    scope = json.dumps([queue if unique_per_queue else None, key], ensure_ascii=False)
    return UniqueScope(hashlib.sha256(scope.encode("utf-8")).hexdigest(), period_ms, states)



def seconds(value: Any) -> Any:
    """A :class:`datetime.timedelta` as float seconds; anything else unchanged (for
    :func:`duration_ms` to validate)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def given_ms(value: Any, what: str, *, allow_zero: bool = False) -> int:
    """:func:`duration_ms` of seconds or a ``timedelta`` (what the public API accepts)."""
    return duration_ms(seconds(value), what, allow_zero=allow_zero)


def duration_ms(seconds: Any, what: str, *, allow_zero: bool = False) -> int:
    """Seconds (int or float) as whole milliseconds, validated."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or \
            not math.isfinite(seconds):
        raise ConfigurationError(f"{what} must be a number of seconds, got {shown(seconds)}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ConfigurationError(f"{what} must be {'>= 0' if allow_zero else '> 0'} seconds, "
                                 f"got {seconds}")
    ms = math.ceil(seconds * 1000)
    if ms > 100 * 365 * 86_400_000:
        raise ConfigurationError(f"{what} of {seconds} seconds is too long")
    return ms



def _unexpected(function: str, name: str, known: Sequence[str]) -> str:
    """Python's own words for a wrong keyword argument, naming the public function, with
    the nearest real option as a hint."""
    close = [SYNONYMS[name]] if SYNONYMS.get(name) in known else \
        difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else \
        f"; it takes {', '.join(known)}"
    return f"{function}() got an unexpected keyword argument {shown(name)}{hint}"



def dump_json(value: Any, what: str, limit: int, option: str,
              error: type[PayloadError]) -> str:
    """``value`` as compact JSON text of at most ``limit`` UTF-8 bytes, storable by every
    engine; else ``error`` naming the problem (``what`` is "payload" or "result")."""
    try:
        text = _ENCODE(value)
    except RecursionError:
        raise error(_too_deep(what)) from None
    except (TypeError, ValueError) as exc:
        raise error(f"{what} is not JSON-serialisable: {exc}") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise error(f"{what} holds text that is not valid Unicode (a lone "
                    f"surrogate?): {exc}") from None
    if size > limit:
        raise error(f"{what} is {size} bytes of JSON, over the limit of {limit} ({option})")
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise error(f"{what} contains a NUL character (\\u0000) in a string or an object "
                    "key, which PostgreSQL cannot store: portq refuses it on every engine")
    if text.count("[") + text.count("{") > MAX_PAYLOAD_DEPTH and \
            _nesting_exceeds(value, MAX_PAYLOAD_DEPTH):
        raise error(_too_deep(what))
    return text


def _too_deep(what: str) -> str:
    return (f"{what} nests arrays/objects more than {MAX_PAYLOAD_DEPTH} levels deep, "
            "the limit on every engine (MariaDB refuses 32)")


def _storable_text(text: str) -> bool:
    """True when every engine can store ``text``: valid UTF-8 without NUL."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _nesting_exceeds(value: Any, limit: int) -> bool:
    """True when a JSON-serialisable value nests arrays/objects more than ``limit`` deep
    (iterative: no recursion limit)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
