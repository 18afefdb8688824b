"""The dashboard's outer ASGI layer: what every request passes before a route sees it.

- **Host check** (DNS rebinding): only the Host names in ``allowed_hosts`` are answered;
  without an access token that is the loopback names (``localhost``, ``127.0.0.1``,
  ``[::1]``) plus what ``--allowed-host`` adds, so a page on ``rebind.evil.example`` that
  resolves to 127.0.0.1 gets a 421, never a page or a CSRF token.
- **Origin check** on every POST: a browser's ``Origin`` must name this very host, and its
  ``Sec-Fetch-Site`` must be ``same-origin``; a cross-site ``fetch``/``<img>``/``<script>``
  of any page is refused too (``Sec-Fetch-Site: cross-site`` on a non-navigation).
- **Body limit**: a body longer than ``max_body`` bytes (``Content-Length`` or counted
  while streaming) gets a 413 before the route or the login check reads it.
- **Errors**: a database outage is a 503 page and one log line; any other failure a 500
  page and one log entry; every response, errors included, carries the security headers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from portq.errors import ConfigurationError, DatabaseError, PortqError

log = logging.getLogger("portq.web")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: renders an error page: (root_path, status, title, message) -> HTML
ErrorPage = Callable[[str, int, str, str], str]

DEFAULT_MAX_BODY = 1 << 20
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    # same-origin (not no-referrer): a browser then sends this origin in the Origin header
    # of the dashboard's own form POSTs (with no-referrer it sends "Origin: null")
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


class BadRequest(Exception):
    """A request the dashboard refuses with ``status`` and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def host_names(allowed: Iterable[str], *, loopback: bool) -> frozenset[str]:
    """The lower-cased Host names (without port) to answer; ``loopback`` adds the loopback
    names. A name starting with ``.`` also allows its subdomains."""
    names = {h.strip().lower() for h in allowed if h.strip()}
    for name in names:
        if "/" in name or " " in name or (":" in name and not name.startswith("[")):
            raise ConfigurationError(
                f"allowed host {name!r} must be a host name or address without a "
                "scheme, port or path (e.g. dashboard.example.com)")
    if loopback:
        names |= set(LOOPBACK_NAMES)
    return frozenset(names)


def split_host(host_header: str) -> tuple[str, str]:
    """``(name, port)`` of a Host header value; the name lower-cased, IPv6 in brackets."""
    value = host_header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return (value[:end + 1], value[end + 2:]) if end > 0 else (value, "")
    name, _, port = value.partition(":")
    return name, port


def host_allowed(host_header: str, allowed: frozenset[str] | None) -> bool:
    """True when ``allowed`` is None (any host) or holds the header's name."""
    if allowed is None:
        return True
    name, port = split_host(host_header)
    if not name or (port and not port.isdigit()):
        return False
    if name in allowed or "*" in allowed:
        return True
    return any(a.startswith(".") and (name.endswith(a) or name == a[1:]) for a in allowed)


def origin_refusal(method: str, headers: dict[str, str],
                   trusted: frozenset[str] = frozenset()) -> str | None:
    """Why a browser request must be refused for coming from another site, or None. A
    POST's Origin must be this very Host, or a name the operator allowed explicitly
    (``trusted``: behind a proxy that rewrites Host, the browser's origin is the proxy's)."""
    site = headers.get("sec-fetch-site")
    if method in _UNSAFE:
        origin = headers.get("origin")
        if origin is not None:
            own = headers.get("host", "").lower()
            scheme_sep = origin.find("://")
            netloc = origin[scheme_sep + 3:].lower().rstrip("/") if scheme_sep >= 0 else ""
            if not netloc or (netloc != own and not (trusted and host_allowed(netloc,
                                                                               trusted))):
                return "this request comes from another origin"
        if site is not None and site != "same-origin":
            return f"this request comes from another site (Sec-Fetch-Site: {site})"
        return None
    if site in ("cross-site", "same-site") and headers.get("sec-fetch-mode") != "navigate":
        return "the dashboard's pages cannot be embedded or fetched by another site"
    return None


class Gate:
    """ASGI middleware applying the checks of this module around the dashboard app."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str] | None,
                 max_body: int, error_page: ErrorPage,
                 trusted_origins: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.trusted_origins = trusted_origins
        self.max_body = max_body
        self.error_page = error_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                         if k.lower().encode() not in present]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        try:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers", [])}
            receive = await self._check(scope, headers, receive)
            await self.app(scope, receive, send_with_headers)
        except BadRequest as exc:
            await self._answer(scope, send_with_headers, exc.status, "Refused", str(exc))
        except DatabaseError as exc:
            log.warning("dashboard.database_unavailable path=%s error=%s: %s",
                        scope.get("path"), type(exc).__name__, _first_line(exc))
            if not started:
                await self._answer(scope, send_with_headers, 503, "Database unavailable",
                                   "The dashboard cannot reach its database right now "
                                   f"({type(exc).__name__}). Try again in a moment.")
        except PortqError as exc:
            if not started:
                await self._answer(scope, send_with_headers, 400, "Refused", _first_line(exc))
        except Exception:
            log.exception("dashboard.error path=%s", scope.get("path"))
            if not started:
                await self._answer(scope, send_with_headers, 500, "Internal error",
                                   "The dashboard failed on this request; its log says why.")

    async def _check(self, scope: Scope, headers: dict[str, str],
                     receive: Receive) -> Receive:
        if not host_allowed(headers.get("host", ""), self.allowed_hosts):
            raise BadRequest(421, "This dashboard does not answer to that host name. "
                                  "Behind a proxy, add it with --allowed-host.")
        reason = origin_refusal(scope.get("method", "GET"), headers, self.trusted_origins)
        if reason:
            raise BadRequest(403, f"Refused: {reason}.")
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            raise BadRequest(413, f"The request body is larger than {self.max_body} bytes.")
        if scope.get("method") not in _UNSAFE:
            return receive
        return await self._buffered(receive)

    async def _buffered(self, receive: Receive) -> Receive:
        """Read the body up to the limit, then replay it to the app."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise BadRequest(413, f"The request body is larger than {self.max_body} "
                                      "bytes.")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        return replay

    async def _answer(self, scope: Scope, send: Send, status: int, title: str,
                      message: str) -> None:
        body = self.error_page(scope.get("root_path", ""), status, title, message).encode()
        headers = [(b"content-type", b"text/html; charset=utf-8"),
                   (b"content-length", str(len(body)).encode())]
        if status == 503:
            headers.append((b"retry-after", b"5"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
