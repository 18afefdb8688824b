"""Throw-away PostgreSQL 15 clusters from Debian's binaries for the failover test: a primary
and a streaming standby (``pg_basebackup -R``) on spare loopback ports in a temporary
directory, run as user postgres; :meth:`Cluster.stop` ``-m immediate`` is the crash."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

BIN = Path(os.environ.get("PORTQ_PG_BIN", "/usr/lib/postgresql/15/bin"))


def missing() -> str | None:
    """Why clusters cannot be made here, or None."""
    if os.geteuid() != 0:
        return "making PostgreSQL clusters needs root (to run them as user postgres)"
    for tool in ("initdb", "pg_ctl", "pg_basebackup"):
        if not (BIN / tool).exists():
            return f"no {BIN / tool} (Debian's postgresql-15 package)"
    if shutil.which("runuser") is None:
        return "no runuser"
    return None


def spare_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*cmd: str, timeout: float = 120) -> str:
    done = subprocess.run(["runuser", "-u", "postgres", "--", *cmd], capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class Cluster:
    def __init__(self, root: Path, name: str, port: int) -> None:
        self.data = root / name
        self.port = port
        self.socket_dir = root

    def conf(self, **settings: object) -> None:
        with (self.data / "postgresql.auto.conf").open("a") as f:
            for key, value in settings.items():
                f.write(f"{key} = '{value}'\n")

    def start(self) -> None:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-l",
                     str(self.data / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def promote(self) -> None:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def psql(self, sql: str) -> str:
        return _as_postgres("psql", "-X", "-h", "127.0.0.1", "-p", str(self.port), "-U",
                            "postgres", "-d", "postgres", "-tAc", sql).strip()

    def log(self) -> str:
        path = self.data / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def make_primary(root: Path, port: int, *, synchronous: bool) -> Cluster:
    root.mkdir(parents=True, exist_ok=True)
    shutil.chown(root, "postgres")
    primary = Cluster(root, "primary", port)
    _as_postgres(str(BIN / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(primary.data))
    primary.conf(port=port, listen_addresses="127.0.0.1", unix_socket_directories=str(root),
                 wal_level="replica", max_wal_senders=4, hot_standby="on",
                 fsync="off", max_connections=60, wal_sender_timeout="5s",
                 synchronous_standby_names="*" if synchronous else "",
                 lc_messages="C")
    primary.start()
    return primary


def make_standby(root: Path, primary: Cluster, port: int, via_port: int | None = None
                 ) -> Cluster:
    """A streaming standby of ``primary`` (replicating through ``via_port``, a proxy, when
    given), started."""
    standby = Cluster(root, "standby", port)
    _as_postgres(str(BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p",
                 str(via_port or primary.port), "-U", "postgres", "-D", str(standby.data),
                 "-R", "-X", "stream", "-c", "fast")
    # pg_basebackup copied the primary's settings: a promoted standby waiting for a
    # synchronous standby of its own would hang every commit (Patroni clears it likewise)
    standby.conf(port=port, wal_receiver_timeout="5s", synchronous_standby_names="",
                 primary_conninfo=f"host=127.0.0.1 port={via_port or primary.port} "
                                  "user=postgres application_name=standby")
    standby.start()
    return standby


def destroy(*clusters: Cluster | None) -> None:
    """Stop whatever still runs (immediately) and remove the data directories."""
    for cluster in clusters:
        if cluster is None:
            continue
        if cluster.running():
            with contextlib.suppress(Exception):
                cluster.stop("immediate")
        shutil.rmtree(cluster.data, ignore_errors=True)
