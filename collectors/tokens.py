"""Who may write to the collector: one shared ``--token``, or a token per team from ``--tokens FILE``.

The file holds one ``TEAM TOKEN`` pair per line (blank lines and ``#`` comments are ignored).
``TOKEN`` is the token itself, or ``sha256:HEX``, the SHA-256 of the token in hex (``printf %s TOKEN |
sha256sum``), so that the file need hold no secret. ``*`` as the team is an administrator, who may
write for any team and read ``/status`` and ``/metrics``. The server re-reads the file when it changes
(:meth:`Tokens.refresh`, every :data:`RELOAD_INTERVAL_S`); a file that no longer parses is logged
and the previous pairs are kept. docs/collector.md, "A token per team", is the user's account.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from traceflow.collectors.settings import MIN_TOKEN_CHARS

_logger = logging.getLogger(__name__)

#: seconds between looks at the tokens file (a removed token is refused within this plus a request)
RELOAD_INTERVAL_S = 1.0
#: the team of an administrator
ADMIN = "*"
_SHA256 = re.compile(r"sha256:([0-9a-fA-F]{64})")
_TEAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")


class TokenFileError(Exception):
    """The tokens file cannot be used (the message names the line and the fix)."""


def token_problem(token: str) -> str | None:
    """Why ``token`` is too weak to guard the collector (None when it is not)."""
    if not token.strip() or any(c.isspace() for c in token):
        return "contains whitespace" if token.strip() else "is only whitespace"
    if len(token) < MIN_TOKEN_CHARS:
        return f"has {len(token)} characters; give at least {MIN_TOKEN_CHARS}"
    if not all(33 <= ord(c) <= 126 for c in token):
        return "has characters outside printable ASCII (an HTTP header cannot carry them safely)"
    return None


@dataclass(frozen=True)
class Caller:
    """Who sent a request: ``team`` None for the shared ``--token`` (or no token at all)."""

    team: str | None

    @property
    def admin(self) -> bool:
        return self.team is None or self.team == ADMIN

    @property
    def forced_team(self) -> str | None:
        """The ``team.id`` the caller's records get, whatever they claim (None: theirs is kept)."""
        return None if self.admin else self.team


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def parse(text: str, source: str) -> dict[bytes, str]:
    """The pairs of a tokens file: SHA-256 of the token -> team; raises :class:`TokenFileError`."""
    table: dict[bytes, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        where = f"{source} line {n}"
        if len(parts) != 2:
            raise TokenFileError(
                f"{where}: expected 'TEAM TOKEN' (two fields separated by spaces), got {len(parts)} fields"
            )
        team, token = parts
        if team != ADMIN and not _TEAM.fullmatch(team):
            raise TokenFileError(
                f"{where}: team {team!r} is not a name: use letters, digits and . _ : / @ + - "
                "(up to 128), or * for an administrator"
            )
        if (m := _SHA256.fullmatch(token)) is not None:
            digest = bytes.fromhex(m.group(1))
        elif token.lower().startswith("sha256:"):
            raise TokenFileError(f"{where}: sha256: must be followed by 64 hexadecimal digits")
        elif (why := token_problem(token)) is not None:
            raise TokenFileError(
                f"{where}: the token {why}; use at least {MIN_TOKEN_CHARS} printable characters "
                "without whitespace, or write it as sha256:HEX"
            )
        else:
            digest = _digest(token.encode())
        if digest in table and table[digest] != team:
            raise TokenFileError(f"{where}: this token is already the token of team {table[digest]!r}")
        table[digest] = team
    if not table:
        raise TokenFileError(f"{source} holds no 'TEAM TOKEN' line")
    return table


class Tokens:
    """The tokens the collector accepts, and the team each stands for."""

    def __init__(self, shared: str | None = None, path: Path | None = None) -> None:
        self._shared = _digest(shared.encode()) if shared else None
        self.path = path
        self._table: dict[bytes, str] = {}
        self._seen: tuple[int, ...] | None = None
        if path is not None:
            self._seen = self._stamp()
            self._table = self._read()

    @property
    def required(self) -> bool:
        return self._shared is not None or self.path is not None

    def _stamp(self) -> tuple[int, ...]:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise TokenFileError(f"cannot read the tokens file {self.path}: {e.strerror}") from None
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)

    def _read(self) -> dict[bytes, str]:
        assert self.path is not None
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TokenFileError(f"cannot read the tokens file {self.path}: {e}") from None
        return parse(text, str(self.path))

    def refresh(self) -> bool:
        """Re-read the file if it changed; True when the pairs were replaced."""
        if self.path is None:
            return False
        try:
            stamp = self._stamp()
            if stamp == self._seen:
                return False
            table = self._read()
        except TokenFileError as e:
            _logger.error("%s; keeping the %d tokens read before", e, len(self._table))
            return False
        self._seen, self._table = stamp, table
        _logger.info("read %d tokens of %d teams from %s", len(table), len(set(table.values())), self.path)
        return True

    def caller(self, authorization: str | bytes | None) -> Caller | None:
        """Who an ``Authorization`` header (or gRPC metadata value) names; None when nobody."""
        if not self.required:
            return Caller(None)
        if authorization is None:
            return None
        got = authorization.encode("latin-1", "replace") if isinstance(authorization, str) else authorization
        if got[:7].lower() != b"bearer ":
            return None
        digest = _digest(got[7:].strip())
        if self._shared is not None and hmac.compare_digest(digest, self._shared):
            return Caller(None)
        team = self._table.get(digest)
        return Caller(team) if team is not None else None
