"""What the mapping of one export request writes to: its rows, the records it refused, and why.

:class:`Mapper` holds the rows (``Parsed``), the :class:`Problems` and the content rule of one
export request; the per-signal walkers (:mod:`traceflow.otlp.logs`, :mod:`traceflow.otlp.spans`,
:mod:`traceflow.otlp.metrics`) and the per-agent mappings append to it and return its
:class:`Mapped`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from traceflow.otlp.attributes import Resource, agent_version, drop_content, family, user_id
from traceflow.rows import Parsed, Row, Tokens


@dataclass
class Mapped:
    """What one export request mapped to.

    ``rejected`` counts records that were refused (not stored), for OTLP ``partial_success``;
    ``message`` says why (empty when all is well; may hold a warning with ``rejected == 0``).
    ``dropped`` counts metric points dropped as duplicates or out of order (not an error);
    ``overflow`` the metric points stored without a delta because their resource has too many streams.
    """

    parsed: Parsed
    rejected: int = 0
    message: str = ""
    dropped: int = 0
    overflow: int = 0  # metric points of streams beyond the per-resource cap (stored without a delta)


class Problems:
    """Counts refused records and collects a short message about them."""

    def __init__(self) -> None:
        self.rejected = 0
        self.dropped = 0
        self._counts: dict[str, int] = {}
        self._examples: dict[str, str] = {}

    def reject(self, why: str, example: str = "") -> None:
        self.rejected += 1
        self.warn(why, example)

    def warn(self, why: str, example: str = "") -> None:
        self._counts[why] = self._counts.get(why, 0) + 1
        if example and why not in self._examples:
            self._examples[why] = example

    def message(self) -> str:
        parts = []
        for why, n in list(self._counts.items())[:5]:
            ex = self._examples.get(why)
            parts.append(f"{why}{f' (e.g. {ex})' if ex else ''}{f' x{n}' if n > 1 else ''}")
        if len(self._counts) > 5:
            parts.append(f"and {len(self._counts) - 5} other problems")
        return "; ".join(parts)

    def mapped(self, parsed: Parsed) -> Mapped:
        return Mapped(parsed, self.rejected, self.message(), self.dropped)


@dataclass
class Mapper:
    """The rows and problems of one export request, and whether content attributes are kept."""

    keep_content: bool
    source: str
    out: Parsed = field(default_factory=Parsed)
    problems: Problems = field(default_factory=Problems)

    def origin(self, agent: str, a: dict[str, Any], res: Resource) -> Origin:
        """The :class:`Origin` of an agent's record: its version from the resource (or
        ``app.version``) and the first user id the record or its resource names."""
        return Origin(self.source, agent, agent_version(a, res.version), user_id(a, res.attrs))

    def attrs(
        self, a: dict[str, Any], res: Resource, tid: str | None, sid: str | None, prefixed: bool = True
    ) -> dict[str, Any]:
        """A row's ``attributes``: ``a`` without content (unless kept), plus resource and ids."""
        if not self.keep_content:
            drop_content(a, prefixed)
        if res.attrs:
            a.setdefault("resource", res.attrs)
        if tid:
            a.setdefault("trace_id", tid)
        if sid:
            a.setdefault("span_id", sid)
        return a

    def span_request_attrs(
        self, a: dict[str, Any], res: Resource, tid: str | None, sid: str | None
    ) -> dict[str, Any]:
        """The ``attributes`` of a request row read off a span (a copy: the span row keeps its own)."""
        ra = dict(a)
        ra["derived_from"] = "span"
        return self.attrs(ra, res, tid, sid)

    def result(self) -> Mapped:
        return self.problems.mapped(self.out)


def scope_groups(resource_groups: Iterable[Any], scopes: str) -> Iterator[tuple[Resource, str | None, Any]]:
    """``(resource, agent family, scope group)`` for each scope group of an export request:
    ``scopes`` names the field (``scope_logs``, ``scope_spans``, ``scope_metrics``) of each of
    ``resource_groups`` (``resource_logs``, ...) that holds them."""
    for rg in resource_groups:
        res = Resource.of(rg.resource)
        for sg in getattr(rg, scopes):
            yield res, family(res.service, sg.scope.name), sg


class Origin(NamedTuple):
    """Who sent a request: the columns of a ``requests`` row that come from the record's context
    rather than its token counts (see :meth:`Mapper.origin`)."""

    source: str
    agent: str | None
    agent_version: str | None
    user_id: str | None


_NO_TOKENS = Tokens()


def request_row(
    origin: Origin,
    *,
    event_id: str,
    attributes: dict[str, Any],
    session_id: str | None = None,
    parent_session_id: str | None = None,
    prompt_id: str | None = None,
    request_id: str | None = None,
    started_at: int | None = None,
    ended_at: int | None = None,
    duration_ms: float | None = None,
    ttft_ms: float | None = None,
    model: str | None = None,
    tokens: Tokens | None = None,
    cache_write_5m_tokens: int | None = None,
    cache_write_1h_tokens: int | None = None,
    reasoning_tokens: int | None = None,
    cost_usd: float | None = None,
    seq: int | None = None,
) -> Row:
    """A ``requests`` row read off OTLP, in column order; what a mapping does not know stays NULL
    (``tokens`` None: none of the four token kinds)."""
    t = tokens or _NO_TOKENS
    return {
        "event_id": event_id,
        "source": origin.source,
        "agent": origin.agent,
        "agent_version": origin.agent_version,
        "user_id": origin.user_id,
        "session_id": session_id,
        "parent_session_id": parent_session_id,
        "prompt_id": prompt_id,
        "request_id": request_id,
        "started_at": started_at,
        "ended_at": ended_at,
        "duration_ms": duration_ms,
        "ttft_ms": ttft_ms,
        "model": model,
        "cold_input_tokens": t.cold_input,
        "cache_read_tokens": t.cache_read,
        "cache_write_tokens": t.cache_write,
        "cache_write_5m_tokens": cache_write_5m_tokens,
        "cache_write_1h_tokens": cache_write_1h_tokens,
        "output_tokens": t.output,
        "reasoning_tokens": reasoning_tokens,
        "cost_usd": cost_usd,
        "attributes": attributes,
        "seq": seq,
    }
