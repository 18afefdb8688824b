"""Bad and hostile input at the URL, CLI and API edges: a clear error naming the problem,
no row written, no password shown anywhere. API-level payload/queue/run_at checks that the
conformance suite already makes (test_enqueue.py::test_bad_input_writes_nothing) are not
repeated here.

"Exact round trip" (the hypothesis test): the payload read back is equal to the payload
written, as Python values, with ints of any size exact. SQLite (TEXT) and MariaDB (JSON is
LONGTEXT) keep the JSON text as written, so there it is also type-exact (``-0.0`` stays a
negative float). PostgreSQL stores ``jsonb``: numbers become ``numeric``, so ``-0.0`` comes
back as ``0.0`` and a float with an integral value written in exponent form (``1e+16``)
comes back as an int whose value is the float's shortest decimal form (so it converts
back to the same float, but is of type int); object keys are reordered.
Values that JSON cannot carry (NaN, infinities) and text that no engine stores (NUL, lone
surrogates) are rejected at enqueue.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import portq
from portq.conformance.helpers import counts, run_portq
from portq.conformance.plugin import TEST_PREFIX
from portq.worker import Worker

PASSWORD = "S3cretPw!"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real ``portq`` command in a subprocess, whatever its exit code."""
    return run_portq(*args, check=False)


def rows_where(queue: portq.Queue, where: str, params: dict[str, Any]) -> int:
    """Count rows of the test table matching a raw condition (values bound)."""
    backend = queue.backend
    sql = f"SELECT COUNT(*) FROM {backend.prefix}job WHERE {where}"
    return int(backend.run("count", lambda cur: backend.execute(cur, sql, params).fetchone()[0],
                           write=False))


# ---- URLs, engines, drivers -------------------------------------------------------------------

@pytest.mark.parametrize(("url", "message"), [  # more parse cases: tests/test_url.py
    ("postgresql:/127.0.0.1/db", "malformed database URL"),
    ("mysql+mysqldb://127.0.0.1/db", "unsupported driver 'mysqldb'"),
    ("postgresql://127.0.0.1:99999/db", "malformed database URL"),
    ("mysql://root@127.0.0.1/test?bogus_option=1", "unknown MySQL URL option 'bogus_option'"),
])
def test_bad_urls_name_the_problem(url: str, message: str) -> None:
    with pytest.raises(portq.ConfigurationError, match=message):
        portq.connect(url)


@pytest.mark.parametrize("prefix", ["", "Portq_", "1abc", "a" * 17, "x; DROP TABLE t; --",
                                    "portq_job --", "a-b", "a.b", "a\"b", "é"])
def test_unsafe_table_prefixes_are_rejected(prefix: str) -> None:
    with pytest.raises(portq.ConfigurationError, match="invalid table prefix"):
        portq.connect("sqlite:///never-created.db", prefix=prefix)


MISSING_DRIVER = textwrap.dedent("""
    import sys
    sys.modules[sys.argv[1]] = None        # the driver is not installed
    import portq
    try:
        portq.connect(sys.argv[2])
    except portq.DriverMissingError as exc:
        print(exc)
        sys.exit(3)
""")


@pytest.mark.parametrize(("module", "url", "extra"), [
    ("psycopg", f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/test", "postgres"),
    ("pymysql", f"mysql://root:{PASSWORD}@127.0.0.1:3306/test", "mysql"),
])
def test_missing_driver_names_the_extra(module: str, url: str, extra: str) -> None:
    proc = subprocess.run([sys.executable, "-c", MISSING_DRIVER, module, url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert f"pip install 'portq[{extra}]'" in proc.stdout and module in proc.stdout
    assert PASSWORD not in proc.stdout + proc.stderr


# ---- option values --------------------------------------------------------------------------

def test_option_limits_are_validated(engine_url: str, queue: portq.Queue, qname: str) -> None:
    for bad in (0, -1, 1.5, "10", True):
        with pytest.raises(portq.ConfigurationError, match="max_payload_bytes"):
            portq.connect(engine_url, prefix=TEST_PREFIX, max_payload_bytes=bad)
    with pytest.raises(portq.ConfigurationError, match="max_attempts"):
        portq.connect(engine_url, prefix=TEST_PREFIX, max_attempts=0)
    queue.enqueue(qname, "one")
    for kwargs in ({"limit": 0}, {"limit": -3}, {"lease": 0}, {"lease": -5},
                   {"lease": math.nan}, {"lease": math.inf}):
        with pytest.raises(portq.ConfigurationError):
            queue.claim(qname, "w", **kwargs)
    for bad_call in (lambda: queue.reap(limit=0), lambda: queue.reap(delay=-1),
                     lambda: queue.prune(-1), lambda: queue.prune(0, limit=0),
                     lambda: queue.prune(0, states=["running"]),
                     lambda: queue.retry_dead(1, extra_attempts=0),
                     lambda: queue.cancel(0), lambda: queue.claim(qname, ""),
                     lambda: Worker(queue, qname, print, lease=0),
                     lambda: Worker(queue, qname, print, concurrency=0),
                     lambda: Worker(queue, [], print)):
        with pytest.raises(portq.ConfigurationError):
            bad_call()
    # the deprecated options are still checked, and say they are deprecated
    for deprecated in ({"prefetch": -1}, {"claimers": 0}, {"ack_delay": -0.5},
                       {"ack_delay": math.nan}):
        name = next(iter(deprecated))
        with pytest.warns(DeprecationWarning, match=f"Worker {name}: deprecated"), \
                pytest.raises(portq.ConfigurationError):
            Worker(queue, qname, print, **deprecated)
    c = counts(queue, qname)
    assert (c["ready"], c["running"]) == (1, 0), "a rejected call changed the queue"


def test_payload_limit_is_configurable(engine_url: str, qname: str) -> None:
    with portq.connect(engine_url, prefix=TEST_PREFIX, max_payload_bytes=64) as q:
        at_limit = "é" * 31  # 62 bytes of UTF-8 + 2 quotes = 64
        q.enqueue(qname, at_limit)
        with pytest.raises(portq.PayloadError, match="65 bytes of JSON, over the limit of 64"):
            q.enqueue(qname, at_limit + "x")
        for bad in ("\ud800", {"k": "a\udfffb"}):
            with pytest.raises(portq.PayloadError, match="not valid Unicode"):
                q.enqueue(qname, bad)
        for key in ("nul\x00key", "lone\udc00"):
            with pytest.raises(portq.ConfigurationError, match="NUL character or a lone"):
                q.enqueue(qname, 1, key=key)
        (job,) = q.claim(qname, "w", limit=5)
        assert job.payload == at_limit


# ---- the CLI -------------------------------------------------------------------------------------

def test_cli_rejects_bad_input_and_writes_nothing(engine_url: str, queue: portq.Queue,
                                                  qname: str) -> None:
    base = [engine_url, "--prefix", TEST_PREFIX]
    cases = [
        (["enqueue", *base, "--queue", "bad name"], "invalid queue name 'bad name'"),
        (["enqueue", *base, "--queue", "x" * 129], "invalid queue name"),
        # a long refused value is named with its length, not printed whole
        (["enqueue", *base, "--queue", "x" * 5000], "x… (5,000 characters): use 1-128"),
        (["enqueue", *base, "--queue", qname, "--key", "k" * 5000],
         "at most 255 characters (Oracle stores '' as NULL), got 'kkk"),
        (["enqueue", *base, "--queue", qname, "--max-attempts", "0"], "must be > 0"),
        (["enqueue", *base, "--queue", qname, "--delay=-5s"], "invalid duration"),
        (["enqueue", *base, "--queue", qname, "--prefix", "x;drop"], "invalid table prefix"),
        (["worker", *base, "--queue", qname, "--handler", "nope:x"],
         "cannot import handler module 'nope'"),
        (["worker", *base, "--queue", qname, "--handler", "json:no_such_function"],
         "json has no 'no_such_function'"),
        (["worker", *base, "--queue", qname, "--handler", "json"], "must look like module:"),
        (["worker", *base, "--queue", qname, "--handler", "json:loads", "--lease=0s"],
         "the minimum is 1s"),
        (["worker", *base, "--queue", qname, "--handler", "json:loads", "--lease", "30"],
         "duration '30' needs a unit: one of ms, s, m, h, d or w"),
        (["enqueue", *base, "--queue", qname, "--delay", "-5s"],
         "invalid duration '-5s': must not be negative"),
        (["worker", *base, "--queue", qname, "--handler", "json:loads", "--concurrency=-2"],
         "must be > 0"),
        (["worker", *base, "--queue", qname, "--handler", "json:loads", "--prefetch=-1"],
         "must be >= 0"),
        (["worker", *base, "--queue", qname, "--handler", "json:loads", "--claimers=0"],
         "must be > 0"),
    ]
    for args, message in cases:
        proc = cli(*args)
        assert proc.returncode != 0, f"{args} exited 0"
        assert message in proc.stderr, f"{args}: {proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
        error = proc.stderr.splitlines()[-1]  # after argparse's usage, if it printed it
        assert len(error) < 300, f"{args}: {len(error)} characters of error"
    assert rows_where(queue, "queue = :q OR queue = :bad OR queue LIKE :long",
                      {"q": qname, "bad": "bad name", "long": "x" * 100 + "%"}) == 0


# ---- hypothesis: payloads and names round-trip exactly -------------------------------------

QUEUE_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-"
storable_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=False, allow_infinity=False) | storable_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(storable_text, inner,
                                                               max_size=4),
    max_leaves=12)


def same_json(wrote: Any, read: Any, engine: str) -> bool:
    """Equal as JSON values; type- and sign-exact except PostgreSQL's jsonb numbers."""
    if isinstance(wrote, float) and engine == "postgres":
        return isinstance(read, int | float) and not isinstance(read, bool) and \
            float(read) == wrote
    if type(wrote) is not type(read):
        return False
    if isinstance(wrote, float):
        return repr(wrote) == repr(read)
    if isinstance(wrote, list):
        return len(wrote) == len(read) and all(
            same_json(a, b, engine) for a, b in zip(wrote, read, strict=True))
    if isinstance(wrote, dict):
        return wrote.keys() == read.keys() and all(
            same_json(v, read[k], engine) for k, v in wrote.items())
    return bool(wrote == read)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(payload=json_values,
       name=st.text(QUEUE_ALPHABET, min_size=1, max_size=100),
       key=st.none() | storable_text.filter(lambda k: 1 <= len(k) <= 200),
       priority=st.integers(min_value=-(2**31 - 1), max_value=2**31 - 1))
@example(payload={"astral": "𝄞🚀𠜎", "big": [2**63, -(2**63) - 1, 2**64, 10**60],
                  "f": [0.1, -0.0, 1e16, 5e-324, 1.7976931348623157e308]},
         name="a.b:c-d_E", key="ключ 🔑 ' \" ; --", priority=-(2**31 - 1))
def test_enqueue_claim_complete_round_trip(queue: portq.Queue, payload: Any, name: str,
                                           key: str | None, priority: int) -> None:
    engine = queue.backend.engine
    qname = f"{name}-{uuid.uuid4().hex[:12]}"
    key = None if key is None else f"{key}|{qname}"
    job_id = queue.enqueue(qname, payload, key=key, priority=priority)
    (job,) = queue.claim(qname, "w-roundtrip", limit=2)
    assert (job.id, job.queue, job.key, job.priority) == (job_id, qname, key, priority)
    assert same_json(payload, job.payload, engine), (payload, job.payload)
    assert queue.complete(job)
    (record,) = queue.jobs("succeeded", queue=qname)
    assert same_json(payload, record.payload, engine) and record.key == key


# ---- SQL injection ------------------------------------------------------------------------------

INJECTIONS = [
    "x'); DROP TABLE portqt_job; --", "' OR '1'='1", "\"; DELETE FROM portqt_job; --",
    "1; UPDATE portqt_job SET state='dead'", "%s %(queue)s :queue ? $1", "\\'; --",
    "`portqt_job`", "*/ SELECT 1 /*", "Robert'); DROP TABLE Students;--",
]


def test_injection_strings_are_rejected_as_names_and_stored_verbatim_as_data(
        queue: portq.Queue, qname: str) -> None:
    backend = queue.backend
    before_version = backend.schema_version()
    for evil in INJECTIONS:
        with pytest.raises(portq.InvalidQueueName):
            queue.enqueue(evil, 1)
        with pytest.raises(portq.InvalidQueueName):
            queue.claim(evil, "w")
        with pytest.raises(portq.InvalidQueueName):
            queue.stats(evil)
    ids = [queue.enqueue(qname, {evil: [evil]}, key=f"{evil}{qname}") for evil in INJECTIONS]
    assert len(set(ids)) == len(INJECTIONS)
    for evil in INJECTIONS:  # worker ids and error texts are bound values too
        (job,) = queue.claim(qname, evil, limit=1)
        assert job.payload == {evil: [evil]} and job.key == f"{evil}{qname}"
        assert job.claim is not None and job.claim.worker_id == evil
        assert queue.fail(job, evil, retry_in=None)
    dead = queue.jobs("dead", queue=qname, limit=100)
    assert sorted(((r.key, r.payload, r.last_error) for r in dead), key=str) == sorted(
        ((f"{e}{qname}", {e: [e]}, e) for e in INJECTIONS), key=str)
    assert [e for _, _, e in queue.job_errors(dead[0].id)] == [dead[0].last_error]
    # the table is intact: every row there, schema current, other rows untouched
    assert rows_where(queue, "queue = :q", {"q": qname}) == len(INJECTIONS)
    assert counts(queue, qname)["dead"] == len(INJECTIONS)
    assert backend.schema_version() == before_version == backend.latest_version()
    backend.check_schema()


# ---- passwords never shown ----------------------------------------------------------------------



def _with_password(url: str) -> str:
    """``url`` (the PostgreSQL under test) with :data:`PASSWORD` as its user's password:
    still a working URL, as trust auth ignores it."""
    scheme, _, rest = url.partition("://")
    user, at, hosts = rest.partition("@")
    assert at and ":" not in user, "the test server's URL has a user and no password"
    return f"{scheme}://{user}:{PASSWORD}@{hosts}"

#: URLs with a password and a closed port: the connection fails
CLOSED_SECRET_URLS = {
    "postgres": f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/test",
    "mysql": f"mysql://root:{PASSWORD}@127.0.0.1:1/test",
}


@pytest.mark.parametrize("engine", ["postgres", "mysql"])
def test_password_never_in_reprs_errors_or_cli(engine: str) -> None:
    closed = CLOSED_SECRET_URLS[engine]
    q = portq.connect(closed, prefix=TEST_PREFIX, pool_timeout=5)
    shown = [repr(q), str(q.url), repr(q.backend), str(q.backend.url), repr(q.backend.url)]
    with pytest.raises(portq.DatabaseError) as raised:
        q.stats()
    exc: BaseException | None = raised.value
    while exc is not None:  # the whole chain
        shown += [str(exc), repr(exc)]
        exc = exc.__cause__ or exc.__context__
    q.close()
    assert isinstance(raised.value, portq.ConnectionLost)
    for command in (["stats", closed], ["enqueue", closed, "--queue", "q"],
                    ["migrate", closed], ["--log-level", "DEBUG", "reap", closed]):
        proc = cli(*command)
        assert proc.returncode == 2, proc.stderr
        assert "***" in proc.stderr
        shown += [proc.stdout, proc.stderr]
    leaks = [s for s in shown if PASSWORD in s]
    assert leaks == []
    assert "***" in repr(q) and "***" in str(raised.value)


def test_password_never_in_stats_or_worker_logs(engine_url: str, qname: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """A working connection whose URL carries a password (trust auth ignores it)."""
    if portq.url.parse_url(engine_url).engine != "postgres":
        pytest.skip("needs an engine that accepts any password (PostgreSQL trust auth)")
    url = _with_password(engine_url)   # this run's own database, never another's
    caplog.set_level(logging.DEBUG)
    with portq.connect(url, prefix=TEST_PREFIX) as q:
        q.enqueue_many([{"queue": qname, "payload": i} for i in range(3)]
                       + [{"queue": qname, "payload": "boom"}])

        def handler(job: portq.Job) -> None:
            if job.payload == "boom":
                raise portq.Permanent(f"failed talking to {q.url}")

        Worker(q, qname, handler, concurrency=2, burst=True, idle_min=0.01, idle_max=0.1,
               reap_interval=None, prune_interval=None, install_signals=False).run()
        assert counts(q, qname)["succeeded"] == 3
        errors = [r.last_error or "" for r in q.jobs("dead", queue=qname)]
    stats = cli("stats", url, "--prefix", TEST_PREFIX, "--queue", qname)
    stats_json = cli("stats", url, "--prefix", TEST_PREFIX, "--json")
    assert stats.returncode == 0 and qname in stats.stdout, stats.stderr
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "worker.started" in logged and "job.dead" in logged
    for text in (logged, stats.stdout, stats.stderr, stats_json.stdout, *errors):
        assert PASSWORD not in text
