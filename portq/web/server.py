"""``portq dashboard URL``: the dashboard app served by uvicorn."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence

from portq.errors import ConfigurationError
from portq.web.security import check_token, is_loopback

TOKEN_VARIABLE = "PORTQ_DASHBOARD_TOKEN"


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond this machine without an access token."""
    if not is_loopback(host) and not token:
        raise ConfigurationError(
            f"refusing to serve the dashboard on {host}, which is not a loopback address, "
            f"without an access token: pass --token or set {TOKEN_VARIABLE} (the dashboard "
            "can retry, cancel and delete jobs), or use --host 127.0.0.1")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or one clear error (port in use, bad host)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve the dashboard on {host}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = "the port is in use" if exc.errno in (98, 48, 10048) else exc.strerror
        raise ConfigurationError(f"cannot serve the dashboard on {host}:{port}: {why}; "
                                 "pick another with --port") from None
    sock.set_inheritable(True)
    return sock


def serve(url: str, *, prefix: str = "portq_", host: str = "127.0.0.1", port: int = 8765,
          read_only: bool = False, token: str | None = None, refresh: float = 5.0,
          allowed_hosts: Sequence[str] = (), query_timeout: float | None = 15.0) -> int:
    """Serve the dashboard until interrupted; returns the exit status."""
    token = token or os.environ.get(TOKEN_VARIABLE) or None
    check_bind(host, token)
    if token is not None:
        check_token(token)
    try:
        import uvicorn
    except ImportError as exc:
        raise ConfigurationError(f"the dashboard needs portq's web extra ({exc}); install "
                                 "it with: pip install 'portq[web]'") from None
    import portq
    from portq.web import app

    timeout_ms = None if not query_timeout else max(1, round(query_timeout * 1000))
    from portq.cli import refuse_missing_sqlite_file
    queue = portq.connect(url, prefix=prefix, statement_timeout_ms=timeout_ms)
    try:
        refuse_missing_sqlite_file(url)
    except ConfigurationError:
        queue.close()
        raise
    try:
        queue.backend.check_schema()
        dashboard = app(queue, read_only=read_only, token=token, poll_seconds=refresh,
                        allowed_hosts=allowed_hosts)
        sock = bind(host, port)
        shown = f"[{host}]" if ":" in host else host
        print(f"portq dashboard for {queue.url} on http://{shown}:{port}/"
              f"{' (read-only)' if read_only else ''}{' (token required)' if token else ''}"
              " - Ctrl-C stops it", file=sys.stderr, flush=True)
        config = uvicorn.Config(dashboard, log_level="warning", access_log=False,
                                server_header=False)
        server = uvicorn.Server(config)
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
    finally:
        queue.close()
    return 0
