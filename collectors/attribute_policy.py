"""``serve --drop-attr NAME`` / ``--hash-attr NAME``: attributes removed or pseudonymised before
they reach the lake (docs/lake.md#personal-data).

The sealer applies the policy to the frames it is about to write: an attribute named ``NAME`` is
removed (or its value replaced by a keyed hash) wherever it sits in a row's ``attributes``, at the top
or in a nested object such as ``resource``; a row whose ``user_id`` was read from that attribute has
its ``user_id`` dropped (or hashed) too. The hash is HMAC-SHA-256 keyed with the secret setting
``TRACEFLOW_HASH_SALT`` (without the key, a hash of a short id such as an e-mail address is undone by
hashing guesses), written ``hmac:`` and 32 hex digits: one value always gives the same hash, so
grouping by the attribute still works.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from traceflow import config

#: the shortest ``TRACEFLOW_HASH_SALT`` that ``--hash-attr`` accepts
MIN_SALT_CHARS = 16


class PolicyError(ValueError):
    """An attribute policy that cannot be applied (a hash without a salt)."""


@dataclass(frozen=True)
class AttributePolicy:
    drop: frozenset[str] = frozenset()
    hash: frozenset[str] = frozenset()
    salt: bytes = b""

    @classmethod
    def from_settings(cls, drop: Iterable[str], hash_: Iterable[str]) -> AttributePolicy:
        """The policy of ``--drop-attr``/``--hash-attr``, keyed with ``TRACEFLOW_HASH_SALT``."""
        hashed = frozenset(n for n in hash_ if n)
        salt = config.get("hash_salt") or ""
        if hashed and len(salt) < MIN_SALT_CHARS:
            raise PolicyError(
                f"--hash-attr needs a secret key: set TRACEFLOW_HASH_SALT to at least {MIN_SALT_CHARS} "
                "characters, e.g. from: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return cls(frozenset(n for n in drop if n) - hashed, hashed, salt.encode())

    @property
    def active(self) -> bool:
        return bool(self.drop or self.hash)

    def hashed(self, value: Any) -> str:
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        return "hmac:" + hmac.new(self.salt, text.encode(), hashlib.sha256).hexdigest()[:32]

    def _walk(self, obj: dict[str, Any], seen: dict[str, str | None]) -> None:
        for key in list(obj):
            value = obj[key]
            if key in self.drop:
                del obj[key]
                seen[str(value)] = None
            elif key in self.hash:
                obj[key] = self.hashed(value)
                seen[str(value)] = obj[key]
            elif isinstance(value, dict):
                self._walk(value, seen)

    def row(self, user_id: str | None, attributes: str | None) -> tuple[str | None, str | None]:
        """A row's ``user_id`` and ``attributes`` (JSON text) under the policy."""
        if not attributes:
            return user_id, attributes
        try:
            obj = orjson.loads(attributes)
        except orjson.JSONDecodeError:
            return user_id, attributes
        if not isinstance(obj, dict):
            return user_id, attributes
        seen: dict[str, str | None] = {}
        self._walk(obj, seen)
        if not seen:
            return user_id, attributes
        if user_id is not None and user_id in seen:
            user_id = seen[user_id]
        return user_id, orjson.dumps(obj).decode()

    def frame(self, frame: Any) -> Any:
        """A polars frame of a lake table with the policy applied (unchanged without ``attributes``)."""
        import polars as pl

        if not self.active or "attributes" not in frame.columns or frame.is_empty():
            return frame
        users = frame["user_id"].to_list() if "user_id" in frame.columns else [None] * frame.height
        out = [self.row(u, a) for u, a in zip(users, frame["attributes"].to_list(), strict=True)]
        cols = [pl.Series("attributes", [a for _, a in out], dtype=pl.String)]
        if "user_id" in frame.columns:
            cols.append(pl.Series("user_id", [u for u, _ in out], dtype=pl.String))
        return frame.with_columns(cols)
