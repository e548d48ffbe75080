"""A token count read from an agent's usage object: the one rule the agent importers share."""

from __future__ import annotations

from typing import Any

from traceflow.rows import Tokens, as_int


def count(obj: Any, key: str, where: str = "", bad: type[ValueError] = ValueError) -> int | None:
    """``obj[key]`` as a count (:func:`traceflow.rows.as_int`), a negative one as 0; None when ``obj``
    is not an object or holds no number at ``key``. A value that is not a number reads as None, or,
    when ``where`` names the object, raises ``bad`` (``<where>.<key> is not a number: <value>``)."""
    if not isinstance(obj, dict):
        return None
    try:
        value = as_int(obj.get(key))
    except (TypeError, ValueError) as exc:
        if where:
            raise bad(f"{where}.{key} is not a number: {obj.get(key)!r}") from exc
        return None
    return None if value is None else max(0, value)


def count_or_zero(obj: Any, key: str) -> int:
    """:func:`count`, with 0 for no number."""
    return count(obj, key) or 0


def usage_tokens(usage: Any, cold: str, read: str, write: str, output: str) -> Tokens:
    """The :class:`~traceflow.rows.Tokens` of a usage object from the counts at these four keys."""
    return Tokens(
        count_or_zero(usage, cold),
        count_or_zero(usage, read),
        count_or_zero(usage, write),
        count_or_zero(usage, output),
    )
