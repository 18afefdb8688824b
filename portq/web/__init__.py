"""The portq web dashboard: an ASGI app (Starlette) over a :class:`portq.Queue`.

Serve it with ``portq dashboard URL``, or mount it in your own ASGI app::

    from starlette.routing import Mount      # FastAPI: app.mount("/portq", dashboard)
    dashboard = portq.web.app(portq.connect(url), read_only=True)
    routes = [Mount("/portq", app=dashboard)]

It needs the optional dependencies of ``pip install 'portq[web]'`` and uses only portq's
public API, so it works on every engine. Every asset ships in the package: no CDN, no
request leaves the server.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from portq.errors import ConfigurationError

if TYPE_CHECKING:
    from portq.queue import Queue


def app(queue: Queue, *, read_only: bool = False, token: str | None = None,
        poll_seconds: float = 5.0, allowed_hosts: Iterable[str] = (),
        max_body: int = 1 << 20, session_seconds: float = 12 * 3600) -> Any:
    """The dashboard as an ASGI application (a ``starlette.applications.Starlette``).

    ``read_only`` hides and refuses every action. With ``token`` every request must carry
    it (a login form sets a session cookie lasting ``session_seconds``; or
    ``Authorization: Bearer <token>``).

    Host names: without a token the dashboard answers only requests whose ``Host`` is a
    loopback name (localhost, 127.0.0.1, [::1]) or one of ``allowed_hosts`` (a name
    starting with ``.`` allows its subdomains); this stops DNS-rebinding pages. With a
    token, ``allowed_hosts`` (when given) is the whole list. A POST must come from this
    very Host or from one of ``allowed_hosts`` (its ``Origin``), and be ``same-origin``.
    Request bodies over ``max_body`` bytes are refused (413) before anything reads them.
    """
    try:
        from portq.web.application import build
        from portq.web.gate import host_names
    except ImportError as exc:  # starlette or jinja2 missing
        raise ConfigurationError(
            f"the dashboard needs portq's web extra ({exc}); install it with: "
            "pip install 'portq[web]'") from None
    names = list(allowed_hosts) if not isinstance(allowed_hosts, str) else [allowed_hosts]
    hosts = host_names(names, loopback=token is None) if token is None or names else None
    if max_body < 1024:
        raise ConfigurationError("max_body must be at least 1024 bytes")
    return build(queue, read_only=read_only, token=token, poll_seconds=poll_seconds,
                 allowed_hosts=hosts, max_body=max_body, session_seconds=session_seconds,
                 trusted_origins=host_names(names, loopback=False))
