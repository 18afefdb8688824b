"""Sessions, the access token and CSRF tokens of the dashboard.

No state is kept on the server: a session is a random id in an HttpOnly, SameSite=Strict
cookie; when an access token is configured the cookie also carries an HMAC proving its
holder presented the token. The CSRF token of a form is an HMAC of the session id. Both
HMACs use a key drawn at start-up, so restarting the dashboard logs everyone out. Every
comparison is constant-time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

SESSION_COOKIE = "portq_session"


class Guard:
    """Checks tokens and issues session and CSRF values for one dashboard instance."""

    def __init__(self, token: str | None) -> None:
        if token is not None and len(token) < 16:
            from portq.errors import ConfigurationError
            raise ConfigurationError("the dashboard token must be at least 16 characters")
        self._token = token.encode() if token is not None else None
        self._key = secrets.token_bytes(32)

    @property
    def needs_login(self) -> bool:
        return self._token is not None

    def token_matches(self, presented: str) -> bool:
        if self._token is None:
            return True
        return hmac.compare_digest(presented.encode(), self._token)

    def _mac(self, purpose: str, session_id: str) -> str:
        return hmac.new(self._key, f"{purpose}:{session_id}".encode(),
                        hashlib.sha256).hexdigest()

    def new_session(self, authenticated: bool) -> str:
        """A cookie value: ``id`` or, after a login, ``id.mac``."""
        session_id = secrets.token_urlsafe(24)
        return f"{session_id}.{self._mac('auth', session_id)}" if authenticated else session_id

    def session_id(self, cookie: str | None) -> str | None:
        """The session id of a cookie value, or None when it is missing or malformed."""
        if not cookie:
            return None
        session_id = cookie.split(".", 1)[0]
        return session_id if 16 <= len(session_id) <= 64 else None

    def authenticated(self, cookie: str | None, bearer: str | None) -> bool:
        """True when no token is configured, or the request proves it knows the token."""
        if self._token is None:
            return True
        if bearer is not None and self.token_matches(bearer):
            return True
        if not cookie or "." not in cookie:
            return False
        session_id, mac = cookie.split(".", 1)
        return hmac.compare_digest(mac, self._mac("auth", session_id))

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
