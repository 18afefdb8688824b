"""Sessions, the access token, CSRF tokens and login throttling of the dashboard.

A session is a random id in an HttpOnly, SameSite=Strict cookie; when an access token is
configured, a login adds the time it was issued and an HMAC proving its holder presented
the token (``id.issued.mac``). Such a session expires ``session_seconds`` after the login
and ends at once on logout (its id is remembered as revoked until it would have expired).
The CSRF token of a form is an HMAC of the session id. Both HMACs use a key drawn at
start-up, so restarting the dashboard logs everyone out. Every comparison is constant-time
(:func:`hmac.compare_digest`). Failed logins are logged and throttled per client address
and overall. :class:`Sessions` is the middleware that gives each browser its session and
sends a request without a valid login to the login page (or a 401 for ``/api/``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import itertools
import logging
import math
import secrets
import threading
import time
from collections import Counter, deque

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from portq.errors import ConfigurationError

SESSION_COOKIE = "portq_session"
DEFAULT_SESSION_SECONDS = 12 * 3600
MIN_TOKEN_LENGTH = 16
MIN_TOKEN_BITS = 64          # length x log2(distinct characters), a crude upper bound
FAILURES_PER_CLIENT = 5      # failed logins a client may make per window
FAILURES_OVERALL = 30        # failed logins all clients together may make per window
FAILURE_WINDOW = 60.0        # seconds
log = logging.getLogger("portq.web")


def check_token(token: str) -> str:
    """Return ``token`` if it is long and varied enough to be a secret."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters; make "
            "one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    distinct = len(set(token))
    steps = Counter(ord(b) - ord(a) for a, b in itertools.pairwise(token))
    sequence = steps.most_common(1)[0][1] > (len(token) - 1) / 2   # e.g. "abcd…", "0123…"
    if distinct < 8 or len(token) * math.log2(distinct) < MIN_TOKEN_BITS or sequence:
        raise ConfigurationError(
            "the dashboard token is too easy to guess (too few different characters, or a "
            "sequence); make one with: python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'")
    return token


class LoginThrottle:
    """Counts failed logins in a sliding window, per client and overall."""

    def __init__(self, per_client: int = FAILURES_PER_CLIENT,
                 overall: int = FAILURES_OVERALL, window: float = FAILURE_WINDOW) -> None:
        self.per_client, self.overall, self.window = per_client, overall, window
        self._lock = threading.Lock()
        self._failures: deque[tuple[float, str]] = deque()

    def _expire(self, now: float) -> None:
        while self._failures and self._failures[0][0] <= now - self.window:
            self._failures.popleft()

    def retry_after(self, client: str) -> float:
        """Seconds ``client`` must wait before its next login attempt (0: go ahead)."""
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            mine = [t for t, c in self._failures if c == client]
            if len(mine) >= self.per_client:
                return mine[-self.per_client] + self.window - now
            if len(self._failures) >= self.overall:
                return self._failures[-self.overall][0] + self.window - now
        return 0.0

    def failed(self, client: str) -> int:
        """Record a failure of ``client``; return its failures in the window."""
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            self._failures.append((now, client))
            return sum(1 for _, c in self._failures if c == client)


class Guard:
    """Checks tokens and issues session and CSRF values for one dashboard instance."""

    def __init__(self, token: str | None,
                 session_seconds: float = DEFAULT_SESSION_SECONDS) -> None:
        if token is not None:
            check_token(token)
        if session_seconds <= 0:
            raise ConfigurationError("the dashboard's session lifetime must be positive")
        self._token = token.encode() if token is not None else None
        self._key = secrets.token_bytes(32)
        self.session_seconds = session_seconds
        self.throttle = LoginThrottle()
        self._revoked: dict[str, float] = {}   # session id -> when it would expire
        self._lock = threading.Lock()

    @property
    def needs_login(self) -> bool:
        return self._token is not None

    def token_matches(self, presented: str) -> bool:
        if self._token is None:
            return True
        return hmac.compare_digest(presented.encode(), self._token)

    def _mac(self, purpose: str, value: str) -> str:
        return hmac.new(self._key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def new_session(self, authenticated: bool) -> str:
        """A cookie value: ``id`` or, after a login, ``id.issued.mac``."""
        session_id = secrets.token_urlsafe(24)
        if not authenticated:
            return session_id
        issued = str(int(time.time()))
        return f"{session_id}.{issued}.{self._mac('auth', f'{session_id}.{issued}')}"

    def session_id(self, cookie: str | None) -> str | None:
        """The session id of a cookie value, or None when it is missing or malformed."""
        if not cookie:
            return None
        session_id = cookie.split(".", 1)[0]
        return session_id if 16 <= len(session_id) <= 64 else None

    def authenticated(self, cookie: str | None, bearer: str | None) -> bool:
        """True when no token is configured, or the request proves it knows the token
        (a bearer token, or a login cookie that has neither expired nor been revoked)."""
        if self._token is None:
            return True
        if bearer is not None and self.token_matches(bearer):
            return True
        parts = (cookie or "").split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return False
        session_id, issued, mac = parts
        if not hmac.compare_digest(mac, self._mac("auth", f"{session_id}.{issued}")):
            return False
        if time.time() - int(issued) > self.session_seconds:
            return False
        with self._lock:
            return session_id not in self._revoked

    def revoke(self, cookie: str | None) -> None:
        """End the session of ``cookie`` (logout) for as long as it could have lasted."""
        session_id = self.session_id(cookie)
        if session_id is None:
            return
        now = time.time()
        with self._lock:
            for old in [s for s, until in self._revoked.items() if until < now]:
                del self._revoked[old]
            self._revoked[session_id] = now + self.session_seconds

    def csrf_token(self, session_id: str) -> str:
        return self._mac("csrf", session_id)

    def csrf_ok(self, session_id: str | None, presented: str | None) -> bool:
        if session_id is None or not presented:
            return False
        return hmac.compare_digest(presented, self.csrf_token(session_id))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Sessions(BaseHTTPMiddleware):
    """Session cookie and access token: every request but ``/static/`` gets a session
    (``request.state.session_id``); without a valid login only ``/login`` is served."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        super().__init__(app)
        self.guard = guard

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        root = request.scope.get("root_path", "")
        path = request.url.path[len(root):]
        if path.startswith("/static/"):  # assets: no session, no cookie, no login
            return await call_next(request)
        cookie = request.cookies.get(SESSION_COOKIE)
        session = self.guard.session_id(cookie)
        fresh = None
        if session is None:
            fresh = self.guard.new_session(authenticated=False)
            session = fresh
        request.state.session_id = session
        auth = request.headers.get("authorization", "")
        bearer = auth[7:] if auth.lower().startswith("bearer ") else None
        response: Response
        if path == "/login" or self.guard.authenticated(cookie, bearer):
            response = await call_next(request)
        elif path.startswith("/api/"):
            response = JSONResponse({"error": "log in first"}, status_code=401)
        else:
            response = RedirectResponse(root + "/login", status_code=303)
        if fresh is not None:
            set_session(request, response, fresh, root)
        return response


def set_session(request: Request, response: Response, value: str,
                root: str | None = None) -> None:
    """Set the session cookie: HttpOnly, SameSite=Strict, Secure over https, scoped to
    the dashboard's path."""
    if root is None:
        root = request.scope.get("root_path", "")
    response.set_cookie(SESSION_COOKIE, value, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path=root or "/")
