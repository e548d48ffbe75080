"""The explorer page's filters, kept in its URL so that a link reproduces the view.

A page's URL names its filters by what a reader knows them as (``?team=payments&model=opus&since=7d``);
each becomes one ``--where`` condition of the JSON API (``team`` is ``attr:team.id``, the others
are the ``--where`` keys of the same names; ``A,B`` is one of a list) and the time range its
``since`` and ``until`` (:func:`api_params`). The page passes the API's parameters on unchanged, so a
chart draws what ``traceflow mix --where ... --format json`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

#: The page's filters: URL parameter -> the ``--where`` key it is.
FILTERS: dict[str, str] = {
    "team": "attr:team.id",
    "project": "project",
    "user": "user",
    "model": "model",
    "agent": "agent",
}
#: The page's time range: ``--since`` and ``--until`` as the CLI reads them (a date, a time, or an
#: age such as ``7d``).
WINDOW = ("since", "until")


def page_filters(params: Mapping[str, str]) -> dict[str, str]:
    """The filters a page's URL holds (in :data:`FILTERS` and :data:`WINDOW` order), empty ones left out."""
    out: dict[str, str] = {}
    for name in (*FILTERS, *WINDOW):
        value = (params.get(name) or "").strip()
        if value:
            out[name] = value
    return out


def api_params(filters: Mapping[str, str]) -> list[tuple[str, str]]:
    """The JSON API's parameters for a page's filters.

    >>> api_params({"team": "payments", "model": "a,b", "since": "7d"})
    [('where', 'attr:team.id=payments'), ('where', 'model=a,b'), ('since', '7d')]
    """
    out = [("where", f"{FILTERS[k]}={v}") for k, v in filters.items() if k in FILTERS]
    return out + [(k, v) for k, v in filters.items() if k in WINDOW]


def link(path: str, filters: Mapping[str, str], **more: str) -> str:
    """``path`` with the page's filters (and ``more``) in its query string.

    >>> link("sessions", {"since": "7d"}, team="a b")
    'sessions?since=7d&team=a+b'
    """
    query = urlencode({**filters, **more})
    return f"{path}?{query}" if query else path
