"""``--where KEY=VALUE``: filters on the keys of ``--by``, turned into a predicate with parameters.

A condition is ``KEY=VALUE`` (the request's value is VALUE), ``KEY!=VALUE`` (it is not: a request
without a value is kept), and ``KEY=A,B`` (one of a list; ``KEY!=A,B``: none of them). Several
conditions are ANDed. The keys are those of ``--by`` that name a value a request carries
(:data:`KEYS`): the columns ``agent``, ``model``, ``user``, ``source``, ``version`` (their
expressions are :data:`traceflow.store.groups.COLUMNS`') and the attributions ``project``, ``host``
and ``attr:NAME``, whose value is the request's own as :mod:`traceflow.store.groups` defines it for
``--by`` (inherited from its stream only where the request carries none; :func:`groups.attributed_sql`).

The predicate (:func:`clauses`) is written for a row that has the requests view's ``event_id`` and
columns (a ``requests`` row, or a row of ``request_steps``): a column condition compares the column,
an attribution condition keeps the ``event_id`` of the requests whose attributed value matches
(``event_id IN (SELECT ...)``, one sub-query for all of them). Values are always positional
parameters (``?``), never SQL text: a value holding ``'`` or ``;`` is data, and selects what equals it.
The selection (:class:`traceflow.store.selection.Selection`, ``where``) carries the conditions, so
every query that takes a selection takes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from traceflow.errors import UsageError
from traceflow.store import groups

#: The keys ``--where`` takes (``attr:NAME`` stands for any resource or row attribute).
KEYS = ("agent", "model", "user", "source", "version", "project", "host", "attr:NAME")

#: Alias of the attributed requests in the sub-query of the attribution conditions.
_ALIAS = "where_attr"


@dataclass(frozen=True)
class Condition:
    """One ``--where``: the key, whether it is negated (``!=``), and the values (one of them)."""

    key: str
    values: tuple[str, ...]
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.key}{'!=' if self.negated else '='}{','.join(self.values)}"


def _check_key(key: str, item: str) -> None:
    if key.startswith("attr:"):
        with contextlib.suppress(UsageError):
            groups.check([key], ["attr:NAME"])  # an attribute name as --by takes it
            return
        raise UsageError(
            f"--where {item!r}: {key!r} is not an attribute name (letters, digits, . _ - /); "
            "e.g. attr:team.id=payments"
        )
    if key not in KEYS:
        raise UsageError(f"--where {item!r}: unknown key {key!r}; choose from: {', '.join(KEYS)}")


def parse(items: Sequence[str] | None) -> tuple[Condition, ...]:
    """``["attr:team.id=payments", "model!=a,b"]`` -> conditions; a usage error names what is wrong."""
    out: list[Condition] = []
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(
                f"--where {item!r} is not KEY=VALUE (or KEY!=VALUE, KEY=A,B); "
                "e.g. --where attr:team.id=payments"
            )
        negated = key.endswith("!")
        key = key.removesuffix("!").strip()
        _check_key(key, item)
        values = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
        if not values:
            raise UsageError(f"--where {item!r} has no value; give one after '=' (KEY=VALUE)")
        out.append(Condition(key, values, negated))
    return tuple(out)


def _compare(expr: str, c: Condition) -> tuple[str, list[Any]]:
    marks = ", ".join("?" for _ in c.values)
    if c.negated:  # a request without a value is not one of them
        return f"({expr} IS NULL OR {expr} NOT IN ({marks}))", list(c.values)
    return f"{expr} IN ({marks})", list(c.values)


def column(key: str) -> str:
    """The expression of a column key over a requests (or ``request_steps``) row."""
    expr = groups.COLUMNS[key][0]
    assert expr is not None
    return expr


def clauses(conditions: Sequence[Condition]) -> tuple[list[str], list[Any]]:
    """The conditions as ``WHERE`` clauses (to be ANDed) and their positional parameters, in order."""
    out: list[str] = []
    params: list[Any] = []
    names: list[str] = []
    attributed: list[Condition] = []
    for c in conditions:
        if groups.is_attribution(c.key):
            if c.key not in names:
                names.append(c.key)
            attributed.append(c)
            continue
        text, values = _compare(column(c.key), c)
        out.append(text)
        params += values
    if attributed:
        inner: list[str] = []
        for c in attributed:
            text, values = _compare(f"{_ALIAS}.attr_g{names.index(c.key)}", c)
            inner.append(text)
            params += values
        out.append(
            f"event_id IN (SELECT {_ALIAS}.event_id FROM {groups.attributed_sql(names)} AS {_ALIAS} "
            f"WHERE {' AND '.join(inner)})"
        )
    return out, params
