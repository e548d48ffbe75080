"""Hermes Agent (NousResearch/hermes-agent) state database: ``$HERMES_HOME/state.db``, else
``~/.hermes/state.db`` (sources and versions in tests/data/SOURCES.md).

Hermes keeps one row per session in table ``sessions`` (``id``, ``model``, ``billing_provider``,
``started_at`` in epoch seconds, ``message_count``, and the session's running totals, updated in
place: ``input_tokens``, ``output_tokens``, ``cache_read_tokens``, ``cache_write_tokens``,
``reasoning_tokens``, ``estimated_cost_usd``, ``actual_cost_usd``). It records no request's usage,
so each session becomes **one row standing for the whole session** (store/recorded.py: the
per-request analyses leave ``agent = 'hermes'`` out) at ``started_at``.

Token split (Anthropic's, as ccusage 20.0.24 reads it): ``cold = input``, ``read = cache_read``,
``write = cache_write``, ``output = output + reasoning`` (billed as output), ``reasoning =
reasoning``; ``cost_usd`` is ``actual_cost_usd``, else ``estimated_cost_usd``. A session without a
model, or with neither tokens nor cost, gives no row. The newest total wins as Droid's does
(:mod:`traceflow.importers.droid`): the row's id is ``stable_id("hermes-session", id)`` and the lake
keeps the copy with the largest total.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.files import databases_under, default_paths
from traceflow.importers.session_db import table_rows
from traceflow.rows import Parsed, Row, Tokens, stable_id

SOURCE = "hermes-db"
AGENT = "hermes"
_COLUMNS = (
    "id",
    "model",
    "billing_provider",
    "started_at",
    "message_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "estimated_cost_usd",
    "actual_cost_usd",
)


def _n(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and value > 0 else 0


def _cost(value: Any) -> float | None:
    return max(0.0, float(value)) if isinstance(value, (int, float)) else None


def session_row(values: dict[str, Any], seq: int) -> Row | None:
    """The row of one ``sessions`` row (None: no model, or no tokens and no cost)."""
    session, model = values.get("id"), values.get("model")
    if not session or not isinstance(model, str) or not model.strip():
        return None
    cold, out = _n(values.get("input_tokens")), _n(values.get("output_tokens"))
    read, write = _n(values.get("cache_read_tokens")), _n(values.get("cache_write_tokens"))
    reasoning = _n(values.get("reasoning_tokens"))
    actual, estimated = _cost(values.get("actual_cost_usd")), _cost(values.get("estimated_cost_usd"))
    cost = actual if actual is not None else estimated
    if not (cold or out or read or write or reasoning or cost):
        return None
    started = values.get("started_at")
    if not isinstance(started, (int, float)) or started <= 0:
        raise ValueError(f"session {session!r} without started_at")
    provider = values.get("billing_provider")
    attrs: dict[str, Any] = {"session_total": True, "message_count": _n(values.get("message_count"))}
    if isinstance(provider, str):
        attrs["provider"] = provider
    return {
        "event_id": stable_id("hermes-session", session),
        "source": SOURCE,
        "agent": AGENT,
        "session_id": str(session),
        "parent_session_id": None,
        "ended_at": int((started if started > 1e12 else started * 1000) * 1000),
        "model": model.strip(),
        **Tokens(cold, read, write, out + reasoning).columns(),
        "reasoning_tokens": reasoning,
        "cost_usd": cost,
        "seq": seq,
        "attributes": attrs,
    }


class HermesImporter:
    """One row per Hermes session from its state database (whole file each time)."""

    name: ClassVar[str] = "hermes"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return databases_under(root, "state.db")

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        table_rows(data, ctx, out, "sessions", _COLUMNS, session_row, "Hermes state")
        return out


IMPORTER = HermesImporter()
