"""Who may read the explorer: a viewer signs in with a token of the tokens file ``serve --tokens``
reads (:class:`traceflow.collectors.tokens.Tokens`: ``TEAM TOKEN`` lines, ``sha256:HEX``, ``*`` an
administrator, re-read when the file changes), and sees the rows of the token's team only.

A browser signs in once through the sign-in form, which sets an HttpOnly session cookie; a script
sends ``Authorization: Bearer TOKEN`` with each request. A session holds its token, checked again at
every request, so a token removed from the file stops its sessions too (within
:data:`~traceflow.collectors.tokens.RELOAD_INTERVAL_S` and a request). Sessions live in this
process's memory: a restarted dashboard asks its viewers to sign in again.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from traceflow.collectors.tokens import RELOAD_INTERVAL_S, Tokens

#: The session cookie's name.
COOKIE = "traceflow_session"
#: How long a sign-in lasts, in seconds (the cookie's Max-Age).
SESSION_S = 12 * 3600
#: At most this many sessions are kept; the oldest go first.
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class Viewer:
    """Who is reading: ``team`` None reads every row (an administrator, or a dashboard without
    sign-in on loopback); otherwise only the rows whose ``team.id`` is ``team``."""

    team: str | None


class Access:
    """Sign-in against ``tokens`` (None: nobody signs in and everybody reads everything, which
    :func:`traceflow.dashboards.live.serve_dashboard` allows on loopback only)."""

    def __init__(self, tokens: Tokens | None) -> None:
        self.tokens = tokens
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[str, float]] = {}  # id -> (token, expiry on the monotonic clock)
        self._checked = time.monotonic()

    @property
    def required(self) -> bool:
        return self.tokens is not None

    def _viewer_of(self, token: str) -> Viewer | None:
        assert self.tokens is not None
        with self._lock:
            if time.monotonic() - self._checked >= RELOAD_INTERVAL_S:
                self._checked = time.monotonic()
                self.tokens.refresh()
        caller = self.tokens.caller(f"Bearer {token}")
        if caller is None:
            return None
        return Viewer(None if caller.admin else caller.team)

    def viewer(self, authorization: str | None, session: str | None) -> Viewer | None:
        """The viewer an ``Authorization: Bearer`` header or a session cookie names; None: nobody."""
        if self.tokens is None:
            return Viewer(None)
        if authorization:
            scheme, _, token = authorization.partition(" ")
            return self._viewer_of(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if session:
            with self._lock:
                held = self._sessions.get(session)
                if held is not None and held[1] < time.monotonic():
                    del self._sessions[session]
                    held = None
            if held is not None:
                return self._viewer_of(held[0])
        return None

    def sign_in(self, token: str) -> tuple[str, Viewer] | None:
        """A new session for ``token`` (its id and viewer); None when the token is not accepted."""
        token = token.strip()
        viewer = self._viewer_of(token) if token and self.tokens is not None else None
        if viewer is None:
            return None
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                for old in [s for s, (_, until) in self._sessions.items() if until < now]:
                    del self._sessions[old]
                while len(self._sessions) >= MAX_SESSIONS:
                    del self._sessions[next(iter(self._sessions))]
            self._sessions[sid] = (token, now + SESSION_S)
        return sid, viewer

    def sign_out(self, session: str | None) -> None:
        if session:
            with self._lock:
                self._sessions.pop(session, None)
