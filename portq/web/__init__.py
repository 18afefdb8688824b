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

from typing import TYPE_CHECKING, Any

from portq.errors import ConfigurationError

if TYPE_CHECKING:
    from portq.queue import Queue


def app(queue: Queue, *, read_only: bool = False, token: str | None = None,
        poll_seconds: float = 5.0) -> Any:
    """The dashboard as an ASGI application (a ``starlette.applications.Starlette``).

    ``read_only`` hides and refuses every action. With ``token`` every request must carry
    it (a login form sets a session cookie; or ``Authorization: Bearer <token>``).
    """
    try:
        from portq.web.routes import build
    except ImportError as exc:  # starlette or jinja2 missing
        raise ConfigurationError(
            f"the dashboard needs portq's web extra ({exc}); install it with: "
            "pip install 'portq[web]'") from None
    return build(queue, read_only=read_only, token=token, poll_seconds=poll_seconds)
