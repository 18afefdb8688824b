"""`portq bench` on SQLite with tiny sizes: the JSON report has every field, with sane
numbers. Measures nothing about speed (no timing thresholds)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from portq import bench
from portq.cli import main
from portq.url import parse_url


def test_bench_json_report_on_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    code = main(["bench", url, "--json", "--no-progress", "--jobs", "60", "--workers", "1,3",
                 "--batch", "1,20", "--sizes", "50,200/1000", "--repeat", "3"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == "sqlite" and report["version"].startswith("SQLite")
    assert report["machine"]["nproc"] >= 1 and report["date"]

    enqueue = {r["mode"].split()[0]: r for r in report["enqueue"]}
    assert set(enqueue) == {"single", "bulk"}
    assert all(r["jobs"] == 60 and r["jobs_per_s"] > 0 for r in enqueue.values())

    runs = report["throughput"]
    assert sorted((r["mode"], r["workers"], r["batch"]) for r in runs) == [
        ("worker", 1, 1), ("worker", 1, 20), ("worker", 3, 1), ("worker", 3, 20)]
    assert not any({"claimers", "prefetch", "ack_delay"} & set(r) for r in runs)
    for r in runs:
        assert r["succeeded"] == r["jobs"] == 60
        assert r["seconds"] > 0 and r["jobs_per_s"] == pytest.approx(60 / r["seconds"], rel=0.1)
        # three runs, and the reported one is their median
        assert len(r["runs"]) == 3 and sorted(r["runs"])[1] == r["jobs_per_s"]

    sizes = [(r["ready"], r["total"]) for r in report["claim_latency"]]
    assert sizes == [(50, 150), (200, 1000)]
    for r in report["claim_latency"]:
        assert r["claimed"] == bench.CLAIM_LIMIT and r["claim_ms"] > 0
        assert r["limited_claim_ms"] > 0  # the claim of a queue with a concurrency limit
        assert r["rate_claim_ms"] > 0 and r["keyed_claim_ms"] > 0  # rate, per-key limits
        assert r["ordered_walk"] is True and r["nodes"]

    # the portqb_ tables are gone afterwards
    import sqlite3
    with sqlite3.connect(tmp_path / "bench.db") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert not [t for t in tables if t.startswith(bench.BENCH_PREFIX)]


def test_bench_rejects_bad_sizes_and_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "sqlite:///x.db", "--sizes", "100/200"])
    assert "TOTAL >= 3 x READY" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "sqlite:///x.db", "--scenario", "nope"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_bench_async_mode_runs_the_async_worker(engine: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--mode async`` beside ``--mode worker``: the AsyncWorker works every job, once per
    worker count and batch size, in the same report as the sync Worker's runs."""
    import os
    url = f"sqlite:///{tmp_path / 'bench.db'}" if engine == "sqlite" else \
        os.environ.get("PORTQ_TEST_PG_URL", "")
    if not url:
        pytest.skip("set PORTQ_TEST_PG_URL for the PostgreSQL run")
    code = main(["bench", url, "--json", "--no-progress", "--scenario", "throughput",
                 "--jobs", "50", "--workers", "1,4", "--batch", "1,20", "--mode", "worker",
                 "--mode", "async"])
    assert code == 0
    runs = json.loads(capsys.readouterr().out)["throughput"]
    assert sorted((r["mode"], r["workers"], r["batch"]) for r in runs) == [
        ("async", 1, 1), ("async", 1, 20), ("async", 4, 1), ("async", 4, 20),
        ("worker", 1, 1), ("worker", 1, 20), ("worker", 4, 1), ("worker", 4, 20)]
    for r in runs:
        assert r["engine"] == engine and r["succeeded"] == r["jobs"] == 50
        assert r["seconds"] > 0 and r["runs"] == [r["jobs_per_s"]]


def test_bench_processes_and_growth_on_sqlite(tmp_path: Path) -> None:
    """Worker processes work every job and report their CPU split; growth fills the table
    to the size asked for and runs the Worker and the raw loop on the empty and the full
    table."""
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    rows = bench.processes_sweep(url, [1, 2], 40, min_seconds=0)
    assert [(r["processes"], r["exited"], r["succeeded"]) for r in rows] == [
        (1, 1, 40), (2, 2, 40)]
    for r in rows:
        assert r["seconds"] > 0 and r["worker_cpu_pct"] > 0 and r["retries"] >= 0
    grown = bench.growth(url, rows=3_000, ready=300, jobs=30)
    assert (grown["rows"], grown["ready"]) == (3_000, 300)
    assert grown["claim"]["claimed"] == bench.CLAIM_LIMIT and grown["fill_s"] > 0
    assert grown["empty"]["succeeded"] == grown["padded"]["succeeded"] == 30
    assert grown["empty_raw"]["succeeded"] == grown["padded_raw"]["succeeded"] == 30


def test_raw_throughput_run_completes_every_job_in_each_form(engine_url: str) -> None:
    """On every engine under test, the raw ceiling's loop claims and completes every job
    once in each completion form the engine has (``complete_claim`` on PostgreSQL only),
    and leaves no row behind."""
    import portq
    engine = parse_url(engine_url).engine
    with portq.connect(engine_url, prefix=bench.BENCH_PREFIX) as queue:
        bench.drop_tables(queue.backend)
        queue.migrate()
        forms = bench.raw_completes(queue.backend)
        assert forms == (["complete", "complete_many", "complete_claim"] if engine == "postgres"
                         else ["complete", "complete_many"])
        try:
            for form in forms:
                r = bench.raw_throughput_run(queue, 130, 3, 20, form)
                assert (r["engine"], r["complete"], r["succeeded"]) == (engine, form, 130)
                assert r["retries"] >= 0 and r["jobs_per_s"] > 0
                # the CPU meter's figures: the client's CPU is read from the process (µs
                # resolution), the server's only where the engine has a server process
                assert r["cpu"]["client_cpu_us_per_job"] > 0
                assert (r["cpu"]["server_cpu_us_per_job"] is None) == (engine == "sqlite")
            # every run's jobs were completed, then pruned: nothing ready, running or kept
            assert [(s.ready, s.running, s.succeeded, s.dead) for s in queue.stats()
                    if s.queue.startswith("bench-raw-")] in ([], [(0, 0, 0, 0)] * len(forms))
        finally:
            bench.drop_tables(queue.backend)


def test_raw_throughput_run_names_an_unknown_form(tmp_path: Path) -> None:
    import portq
    from portq.errors import ConfigurationError
    with portq.connect(f"sqlite:///{tmp_path / 'bench.db'}", prefix=bench.BENCH_PREFIX) as q:
        q.migrate()
        with pytest.raises(ConfigurationError, match="'complete_claim' on sqlite"):
            bench.raw_throughput_run(q, 10, 1, 5, "complete_claim")


def test_complete_claim_is_fenced_per_job_and_claims_the_next_batch(engine_url: str) -> None:
    """PostgreSQL's one-statement completion + claim completes exactly the claims that
    still own their job (a stale generation or another worker's claim is not written) and
    claims the next jobs in the same statement."""
    import portq
    if parse_url(engine_url).engine != "postgres":
        pytest.skip("complete_claim is PostgreSQL's statement")
    with portq.connect(engine_url, prefix=bench.BENCH_PREFIX) as queue:
        bench.drop_tables(queue.backend)
        queue.migrate()
        try:
            queue.enqueue_many([{"queue": "cc", "payload": {"n": i}} for i in range(5)])
            first = queue.claim("cc", "w1", limit=3)
            claims: list[dict[str, object]] = [
                {"job_id": j.id, "generation": j.attempt, "worker_id": "w1"} for j in first]
            claims[1]["generation"] = first[1].attempt + 1  # stale: not this generation
            claims[2]["worker_id"] = "w2"  # another worker's claim
            backend = queue.backend
            conn = backend.connect()
            try:
                cur = conn.cursor()
                backend.begin(conn, True)
                rows = backend.execute(cur, str(bench.complete_claim_sql(backend)), {
                    "claims": json.dumps(claims), "queue": "cc", "worker_id": "w1",
                    "limit": 10, "lease_ms": 60_000}).fetchall()
                conn.commit()
            finally:
                conn.close()
            done = {(r[1], r[5]) for r in rows if r[0] == "done"}
            claimed = sorted(r[1] for r in rows if r[0] == "claimed")
            assert done == {(first[0].id, first[0].attempt)}
            assert claimed == sorted(set(range(first[0].id, first[0].id + 5)) -
                                     {j.id for j in first})
            records = [queue.job(j.id) for j in first]
            assert [r.state if r else None for r in records] == [
                "succeeded", "running", "running"]
        finally:
            bench.drop_tables(queue.backend)


def test_bench_leaves_no_sqlite_file_behind(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A file the run created is removed (with its -wal/-shm); an existing file keeps its
    other tables and gets the benchmark's pages back (VACUUM)."""
    fresh = tmp_path / "fresh.db"
    args = ["--json", "--no-progress", "--scenario", "enqueue", "--jobs", "2000"]
    assert main(["bench", f"sqlite:///{fresh}", *args]) == 0
    assert list(tmp_path.iterdir()) == [], "the benchmark left files behind"
    import sqlite3
    kept = tmp_path / "kept.db"
    with sqlite3.connect(kept) as conn:
        conn.execute("CREATE TABLE mine (x INTEGER)")
        conn.execute("INSERT INTO mine VALUES (1)")
    size = kept.stat().st_size
    assert main(["bench", f"sqlite:///{kept}", *args]) == 0
    capsys.readouterr()
    with sqlite3.connect(kept) as conn:
        assert conn.execute("SELECT x FROM mine").fetchall() == [(1,)]
    assert kept.stat().st_size <= size + 4096


def test_run_py_middleware_only_rewrites_its_section_alone(tmp_path: Path) -> None:
    """`benchmarks/run.py --middleware-only` (tiny sizes, SQLite): the results JSON gains
    the rounds of every variant on both fronts; the doc is the one the JSON made before,
    with the section "Middleware cost" added; an unknown variant is named."""
    import shutil
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    results, doc = tmp_path / "latest.json", tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    shutil.copy(root / "benchmarks" / "results" / "latest.json", results)
    before = json.loads(results.read_text())
    before.pop("middleware", None)
    command = [sys.executable, str(root / "benchmarks" / "run.py"), "--middleware-only",
               "--engines", "sqlite", "--middleware-jobs", "40", "--middleware-rounds", "2",
               "--results", str(results), "--doc", str(doc)]
    subprocess.run([*command, "--middleware", "none,empty,pass,otel,metrics"], check=True,
                   capture_output=True, timeout=300)
    after = json.loads(results.read_text())
    runs = after.pop("middleware")
    assert after == before  # nothing else measured anew
    assert runs["variants"] == ["none", "empty", "pass", "otel", "metrics"]
    for front in ("threads", "asyncio"):
        for measure in ("runs", "cpu"):
            got = runs[measure]["sqlite"][front]
            assert {v: len(r) for v, r in got.items()} == dict.fromkeys(runs["variants"], 2)
            assert all(x > 0 for r in got.values() for x in r)
    assert len(runs["loadavg"]["sqlite"]) == 2
    text = doc.read_text()
    section = text[text.index("## Middleware cost"):text.index("## Plots")]
    assert section.count("| threads |") == section.count("| asyncio |") == 5
    assert "(SDK `TracerProvider`, no exporter)" in section
    bad = subprocess.run([*command, "--middleware", "none,fast"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0 and "unknown variant fast" in bad.stderr


def test_cpu_meter_names_the_thread_that_used_the_cpu() -> None:
    """A thread that spins through the metered span is the busiest, with most of its CPU
    counted; one that only sleeps through it is counted with next to none; the meter's
    own sampling thread is left out of the client's figures."""
    import threading
    import time

    spun: list[float] = []

    def spin(until: float) -> None:
        # 0.4 s of this thread's own CPU, however loaded the machine (at most 10 s)
        while time.thread_time() < 0.4 and time.perf_counter() < until + 10:
            pass
        spun.append(time.thread_time())  # this thread's own CPU, as the kernel counts it

    started = time.perf_counter()
    with bench.CpuMeter(()) as meter:
        until = time.perf_counter() + 0.4
        spinner = threading.Thread(target=spin, args=(until,), name="test-spinner")
        sleeper = threading.Thread(target=time.sleep, args=(0.4,), name="test-sleeper")
        spinner.start()
        sleeper.start()
        spinner.join()
        sleeper.join()
    wall = time.perf_counter() - started  # the meter's span, or a little more
    f = meter.figures(1000)
    assert f["busiest_thread"] == "test-spinner"
    # the spinner's CPU as the meter counted it, against the thread's own count (a loaded
    # machine gives the spinner less of a core, 19% of one in a CI run; the meter must
    # still count what it got, short of its last sample (a thread that ended is read no
    # more) and 3 ticks of 10 ms)
    counted = f["busiest_thread_pct"] / 100 * wall
    missed = bench.METER_SAMPLE_S + 0.03
    assert spun[0] >= 0.4 and counted >= spun[0] - missed, (counted, spun)
    assert f["client_cpu_us_per_job"] * 1000 / 1e6 >= spun[0] - missed
    assert f["server_cpu_us_per_job"] is None  # no server process named
    assert f["bound"] == bench.cpu_bound(f)


def test_cpu_meter_counts_a_tracked_thread_that_ends_between_two_samples() -> None:
    """A thread started after the meter's start that spins and ends before the meter's
    first sample (a SQLite run of 10,000 jobs lasts about that long) is counted whole
    when its target was made by ``tracked``: it is the busiest thread, with its own CPU.
    The same spin untracked is not counted (what the report showed before: the main
    thread as a run's busiest)."""
    import threading
    import time

    spun: dict[str, float] = {}

    def spin() -> None:
        # 0.1 s of this thread's own CPU (at most 5 s of wall time on a loaded machine)
        deadline = time.perf_counter() + 5
        while time.thread_time() < 0.1 and time.perf_counter() < deadline:
            pass
        spun[threading.current_thread().name] = time.thread_time()

    def metered(name: str, track: bool) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        with bench.CpuMeter(()) as meter:
            thread = threading.Thread(target=meter.tracked(spin) if track else spin,
                                      name=name)
            thread.start()
            thread.join()
        took = time.perf_counter() - started
        if took >= bench.METER_SAMPLE_S:
            pytest.skip(f"a spin took {took:.2f}s: a sample may have caught it")
        return meter.figures(1000), took

    f, took = metered("test-tracked", True)
    assert f["busiest_thread"] == "test-tracked", f
    counted = f["busiest_thread_pct"] / 100 * took  # took: the meter's span, or a bit more
    assert spun["test-tracked"] * 0.9 <= counted <= spun["test-tracked"] * 1.2, (counted, spun)
    f, _ = metered("test-untracked", False)
    assert f["busiest_thread"] != "test-untracked", f


@pytest.mark.parametrize(("figures", "bound"), [
    ({"machine_busy_pct": 97.0, "client_cpu_us_per_job": 40.0,
      "server_cpu_us_per_job": 60.0, "client_core_pct": 60.0}, "CPU (server)"),
    ({"machine_busy_pct": 90.0, "client_cpu_us_per_job": 70.0,
      "server_cpu_us_per_job": 60.0, "client_core_pct": 99.0}, "CPU (client)"),
    ({"machine_busy_pct": 55.0, "client_cpu_us_per_job": 54.0,
      "server_cpu_us_per_job": None, "client_core_pct": 109.0}, "one core (client)"),
    ({"machine_busy_pct": 80.0, "client_cpu_us_per_job": 38.0,
      "server_cpu_us_per_job": 46.0, "client_core_pct": 66.0},
     "waits (round trips, commits, locks)"),
])
def test_cpu_bound_names_what_bounded_a_run(figures: dict[str, float | None],
                                            bound: str) -> None:
    assert bench.cpu_bound(figures) == bound


@pytest.mark.slow
def test_run_py_says_what_bounded_each_round(tmp_path: Path) -> None:
    """`benchmarks/run.py` on SQLite alone (tiny sizes, two rounds): every round of the
    raw loop and the Worker carries the CPU meter's figures in the results JSON, and the
    doc's table "What bounded each run" has a row per contender with its bound; each run's
    bulk enqueue is kept, and their median reported."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    results, doc = tmp_path / "latest.json", tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    subprocess.run([sys.executable, str(root / "benchmarks" / "run.py"), "--engines", "sqlite",
                    "--jobs", "300", "--workers", "4", "--rounds", "2",
                    "--engine-rounds", "2", "--skip-peers",
                    "--no-pickup", "--no-io", "--no-growth", "--processes", "",
                    "--middleware", "", "--results", str(results), "--doc", str(doc)],
                   check=True, capture_output=True, timeout=600)
    res = json.loads(results.read_text())
    rounds, cpu = res["engine_rounds"]["sqlite"], res["engine_rounds_cpu"]["sqlite"]
    assert set(cpu) == set(rounds) and len(rounds["portq worker"]) == 2
    for figures in (f for runs in cpu.values() for f in runs):
        assert figures["client_cpu_us_per_job"] > 0 and figures["server_cpu_us_per_job"] is None
        assert figures["bound"] == bench.cpu_bound(figures)
    text = doc.read_text()
    table = text[text.index("### What bounded each run"):text.index("## Claim latency")]
    rows = [line for line in table.splitlines() if line.startswith("| sqlite, rounds |")]
    assert [row.split(" | ")[1] for row in rows] == list(rounds)
    assert all(row.rstrip(" |").rsplit("| ", 1)[1] in (
        "one core (client)", "CPU (client)", "waits (round trips, commits, locks)")
        for row in rows)
    # every run of the rounds enqueued its jobs first: one bulk-enqueue rate each, whose
    # median the report gives with its spread
    enqueues = res["engine_rounds_enqueue"]["sqlite"]
    assert len(enqueues) == sum(len(runs) for runs in rounds.values()) and min(enqueues) > 0
    assert f"Bulk enqueue on sqlite, the median of the {len(enqueues)} bulk enqueues" in text
    # no PostgreSQL here: the SQLite target still reads these rounds, and says so, with
    # each round's own ratio beside the ratio of the medians
    assert "comes from this run's sweeps and its pair rounds on sqlite (the raw " \
        "`complete_many` loop and the Worker, one after the other in each), which each " \
        "Worker-against-raw target reads" in text and "this run had no rounds" not in text
    (target,) = [line for line in text.splitlines()
                 if line.startswith("| SQLite: portq worker >= 85%")]
    assert re.fullmatch(r".* \| \d+% \| \d+% \[\d+%-\d+%\] \|", target), target


def test_cpu_meter_counts_a_server_process_that_ended_between_samples(tmp_path: Path) -> None:
    """A "server" child that burns CPU and ends between two of the meter's samples (as a
    PostgreSQL backend whose connection closed) is counted whole, through its parent's
    reaped children; the parent's own idle time adds next to nothing."""
    import os
    import subprocess
    import sys
    import time
    if not os.path.isdir("/proc"):
        pytest.skip("the meter reads Linux's /proc")
    server = tmp_path / "pqsrv"  # the command name the meter looks for
    server.symlink_to(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    child = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.15: pass"
    parent = (f"import subprocess, sys, time\nsubprocess.run([{str(server)!r}, '-c', "
              f"{child!r}], check=True)\nprint('reaped', flush=True)\ntime.sleep(30)")
    proc = subprocess.Popen([str(server), "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.05)  # the parent runs: the meter finds it at its start
        with bench.CpuMeter(("pqsrv",)) as meter:
            assert proc.stdout is not None and proc.stdout.readline() == "reaped\n"
        f = meter.figures(1000)
    finally:
        proc.kill()
        proc.wait()
    # 0.15 s of the child's CPU (counted in 10 ms ticks), per 1,000 jobs: >= 130 µs a job
    assert f["server_cpu_us_per_job"] >= 130, f


@pytest.mark.parametrize("front", bench.CEILING_FRONTS)
def test_sleep_ceiling_runs_every_job_once_at_most_at_the_ideal(front: str) -> None:
    """The bare ceiling of an I/O-bound workload: ``slots`` threads or tasks taking ``jobs``
    waits of ``job_ms`` between them. It cannot beat slots / wait (every wait is whole),
    and the slots wait side by side (one slot would take jobs x wait)."""
    slots, job_ms, jobs = 4, 20.0, 40
    rate = bench.sleep_ceiling(front, slots, job_ms, jobs)
    ideal = slots * 1000 / job_ms  # 200 jobs/s
    serial = 1000 / job_ms  # one slot: 50 jobs/s
    assert 2 * serial < rate <= ideal * 1.01


def test_sleep_ceiling_names_a_bad_front_or_size() -> None:
    with pytest.raises(ValueError, match="unknown front 'greenlets'; use threads, asyncio"):
        bench.sleep_ceiling("greenlets", 4, 5.0, 10)
    with pytest.raises(ValueError, match="slots >= 1"):
        bench.sleep_ceiling("threads", 0, 5.0, 10)


def run_py() -> Any:
    """benchmarks/run.py as a module (it is a script, not part of the package)."""
    import importlib
    import sys
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        return importlib.import_module("run")
    finally:
        sys.path.remove(str(root / "benchmarks"))


def test_run_py_gives_each_io_front_its_share_of_its_bare_ceiling() -> None:
    """The I/O-bound section of docs/benchmarks.md: each contender's share of its own
    front's bare ceiling (threads for the Worker, asyncio for the AsyncWorker and
    pgqueuer), and whether 1.5x pgqueuer lies above a ceiling (then no queue on that
    front could reach it)."""
    run = run_py()
    runs: dict[str, list[float]] = {"portq worker": [7000.0, 7200.0, 7100.0],
                                    "portq async": [6900.0, 6800.0, 7000.0],
                                    "pgqueuer": [5000.0, 5100.0, 4900.0]}
    ceiling: dict[str, list[float]] = {"threads": [7800.0, 7900.0, 7850.0],
                                       "asyncio": [7400.0, 7450.0, 7500.0]}
    io = {"slots": 40, "job_ms": 5.0, "jobs": 1000, "ideal": 8000.0, "loadavg": [1.0, 1.0],
          "runs": runs, "ceiling": ceiling}
    text = "\n".join(run.io_section({"io": io}))
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")
            for line in text.splitlines() if line.startswith("| p")}
    assert rows["portq worker"][4] == "90%"   # 7,100 of the threads' 7,850
    assert rows["portq async"][4] == "93%"    # 6,900 of asyncio's 7,450
    assert rows["pgqueuer"][4] == "67%"       # 5,000 of asyncio's 7,450
    assert "1.5x pgqueuer is 7,500 jobs/s, above the bare asyncio ceiling" in text
    runs["pgqueuer"] = [4600.0]
    assert "1.5x pgqueuer is 6,900 jobs/s, under every bare ceiling." in \
        "\n".join(run.io_section({"io": io}))
    assert "85% of the ideal is" not in text  # 6,800: under both ceilings
    ceiling["asyncio"] = [6700.0, 6600.0, 6900.0]
    assert "85% of the ideal is 6,800 jobs/s, above the bare asyncio ceiling: no queue on " \
        "that front could reach it in these rounds." in "\n".join(run.io_section({"io": io}))


def test_run_py_reports_every_io_peer_that_ran_with_how_it_ran_and_no_verdict() -> None:
    """Each peer that ran the I/O-bound rounds gets a row of its own (its share of the
    asyncio bare ceiling, no verdict: the targets are portq's) and its configuration in
    the section's text; a peer with no round (its venv missing) is left out of both."""
    run = run_py()
    io = {"slots": 40, "job_ms": 5.0, "jobs": 1000, "ideal": 8000.0, "loadavg": [1.0],
          "runs": {"portq worker": [7000.0], "portq async": [6900.0],
                   "pgqueuer": [4000.0], "procrastinate": [400.0, 500.0, 450.0],
                   "chancy": [1700.0], "oban": []},
          "ceiling": {"threads": [7800.0], "asyncio": [7500.0]}}
    text = "\n".join(run.io_section({"io": io}))
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")
            for line in text.splitlines() if line.startswith("| ")}
    assert rows["procrastinate"][1:5] == ["450", "400-500", "5%", "6%"]
    assert rows["chancy"][-1].strip(" |") == "" and rows["portq async"][-1] == "met |"
    assert "oban" not in rows and "one server-mode Oban" not in text
    assert "procrastinate: one worker, concurrency 40" in text
    assert "chancy: one Worker, queue concurrency 40" in text


def test_run_py_pairs_each_rounds_contenders_for_the_ratio_targets() -> None:
    """docs/benchmarks.md's targets table: beside one contender's median over the other's,
    the ratio of the two within each round (its median and range), by round; a target
    whose contenders did not both run is left out."""
    run = run_py()
    res = {"head_to_head": {"portq worker": [10.0, 22.0, 30.0],
                            "raw complete_many": [11.0, 20.0, 33.0]},
           "engine_rounds": {"sqlite": {"portq worker": [8.0, 9.0],
                                        "raw complete_many": [10.0, 10.0]}}}
    paired = run.paired_ratios(res)
    # the medians' ratio is 22 / 20 = 1.1; within each round the Worker was behind in two
    worker = paired["worker_vs_raw"]
    assert round(worker[0], 3) == round(10 / 11, 3) and round(worker[2], 2) == 1.1
    assert [round(x, 3) for x in paired["worker_vs_raw_sqlite"]] == [0.85, 0.8, 0.9]
    assert "worker_vs_pgqueuer" not in paired and "worker_vs_raw_mysql" not in paired


def test_run_py_reads_the_postgres_raw_target_from_its_pair_rounds() -> None:
    """With pair rounds on PostgreSQL, its Worker-against-raw target reads them (more
    rounds than the head to head), both as the ratio of medians and paired by round; the
    peers' and the AsyncWorker's targets still read the head to head."""
    run = run_py()
    res = {"engines": {}, "raw": [], "peers": [],
           "head_to_head": {"portq worker": [10.0, 22.0, 30.0],
                            "raw complete_many": [11.0, 20.0, 33.0],
                            "portq async": [9.0, 20.0, 27.0], "pgqueuer": [5.0, 10.0, 12.0]},
           "engine_rounds": {"postgres": {"portq worker": [12.0, 13.0, 15.0, 9.0, 14.0],
                                          "raw complete_many": [12.0, 12.0, 14.0, 10.0,
                                                                13.0]}}}
    r = run.ratios(res)
    assert round(r["worker_vs_raw"], 3) == round(13 / 12, 3)  # not 22 / 20
    assert round(r["worker_vs_pgqueuer"], 3) == 2.2 and round(r["async_vs_worker"], 3) == 0.909
    paired = run.paired_ratios(res)
    assert round(paired["worker_vs_raw"][0], 3) == round(15 / 14, 3)
    assert round(paired["worker_vs_raw"][1], 3) == 0.9
    assert round(paired["worker_vs_pgqueuer"][0], 3) == 2.2


def test_run_py_reads_each_engines_own_raw_loop_from_the_sweeps() -> None:
    """A run with no rounds: each Worker-against-raw target divides by its own engine's
    raw loop in the sweeps (PostgreSQL's too, though SQLite's raw rows come first)."""
    run = run_py()

    def sweep(jobs_per_s: float) -> dict[str, Any]:
        return {"throughput": [{"mode": "worker", "workers": 4, "batch": 20,
                                "jobs_per_s": jobs_per_s}]}
    res = {"engines": {"sqlite": sweep(80.0), "postgres": sweep(90.0)},
           "raw": [{"engine": "sqlite", "workers": 4, "complete": "complete_many",
                    "jobs_per_s": 100.0},
                   {"engine": "postgres", "workers": 4, "complete": "complete_many",
                    "jobs_per_s": 120.0}],
           "peers": []}
    r = run.ratios(res)
    assert r["from"] == "sweeps"
    assert round(r["worker_vs_raw"], 3) == 0.75  # 90 / 120, not 90 / SQLite's 100
    assert round(r["worker_vs_raw_sqlite"], 3) == 0.8
    assert "worker_vs_raw_mysql" not in r


def test_run_py_states_what_bounded_the_wide_asyncio_rounds() -> None:
    """The 200-slot asyncio case of docs/benchmarks.md: its verdict against the lower of
    the ideal and the no-op rate, each round's own ratio of the two, and the CPU figures
    of each kind's median round in the table "What bounded each run" (left out for
    results that have none)."""
    run = run_py()

    def figures(client: float, busy: float) -> dict[str, Any]:
        return {"client_cpu_us_per_job": client, "server_cpu_us_per_job": 40.0,
                "client_core_pct": 70.0, "busiest_thread": "MainThread",
                "busiest_thread_pct": 38.0, "machine_busy_pct": busy,
                "bound": "waits (round trips, commits, locks)"}
    wide = {"slots": 200, "jobs": 1000, "ideal": 40000.0,
            "io": [17000.0, 20000.0, 21000.0], "noop": [20000.0, 25000.0, 24000.0],
            "io_cpu": [figures(40.0, 70.0), figures(36.0, 79.0), figures(33.0, 80.0)],
            "noop_cpu": [figures(30.0, 81.0), figures(25.0, 83.0), figures(27.0, 82.0)]}
    text = run.wide_io_lines(wide)[1]
    # 20,000 of the no-op median 24,000 (under the ideal): 83%
    assert "83% of 24,000, target >= 85%: missed" in text
    # per round 0.85, 0.8, 0.875
    assert "median 85% [80%-87%]" in text
    assert "What bounded its median rounds" in text
    rows = [line for line in run.cpu_section({"io": {"wide": wide}})
            if line.startswith("| PostgreSQL, AsyncWorker of 200 slots")]
    # the median rounds: 5 ms jobs 20,000 (36 µs, 79% busy), no-op 24,000 (27 µs)
    assert rows == [
        "| PostgreSQL, AsyncWorker of 200 slots | 5 ms jobs | 20,000 | 36 | 40 | 70% | "
        "MainThread 38% | 79% | waits (round trips, commits, locks) |",
        "| PostgreSQL, AsyncWorker of 200 slots | no-op jobs | 24,000 | 27 | 40 | 70% | "
        "MainThread 38% | 82% | waits (round trips, commits, locks) |"], rows
    older = {k: v for k, v in wide.items() if not k.endswith("_cpu")}
    assert "What bounded" not in run.wide_io_lines(older)[1]
    assert run.cpu_section({"io": {"wide": older}}) == []


def test_run_py_never_shows_a_missed_target_as_met() -> None:
    """A ratio is judged unrounded and shown cut down to the precision of its cell, never
    rounded up: a Worker at 99.6% of the raw loop (which read "100%" beside a met
    verdict) is 99% and misses; one at 100% meets."""
    run = run_py()
    assert [run.floored(v) for v in (0.996, 1.0, 0.85, 0.8499)] == ["99%", "100%", "85%", "84%"]
    assert [run.floored(v, "x") for v in (1.498, 1.5, 2.4567)] == ["1.49x", "1.50x", "2.45x"]
    assert run.floored(19_999.6, "jobs/s") == "19,999 jobs/s"

    def judged(worker: float) -> tuple[str, str]:
        res = {"engines": {}, "raw": [], "peers": [],
               "head_to_head": {"portq worker": [worker], "raw complete_many": [1000.0]}}
        r = run.ratios(res)
        row = next(line for line in run.target_rows(res)
                   if line.startswith("| portq worker >= 1.0x the raw"))
        return run.verdict(r), row.split(" | ")[1]
    verdict, shown = judged(996.0)
    assert "misses the raw-ceiling target" in verdict and shown == "99%"
    verdict, shown = judged(1000.0)
    assert "meets the raw-ceiling target" in verdict and shown == "100%"
