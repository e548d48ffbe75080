"""Goose (block/goose) session database: ``$GOOSE_DATA_DIR/sessions/sessions.db``, else
``~/.local/share/goose/sessions/sessions.db`` (sources and versions in tests/data/SOURCES.md).

Goose keeps one row per session in table ``sessions`` (``id``, ``created_at``, ``provider_name``,
``model_config_json`` = ``{"model_name": ...}``, and token columns it **updates in place** as the
session runs: ``input_tokens``, ``output_tokens``, ``total_tokens`` of the last exchange and
``accumulated_input_tokens``, ``accumulated_output_tokens``, ``accumulated_total_tokens`` of the
session). It records no request's usage and no cache split, so each session becomes **one row
standing for the whole session** (store/recorded.py: the per-request analyses leave ``agent =
'goose'`` out) at ``created_at``, with the accumulated counts (the last exchange's where a session has
none, as ccusage 20.0.24 reads them): ``cold = input`` (the whole prompt: the cached part is
unknown), ``read`` and ``write`` unknown (NULL), ``reasoning = total − input − output`` (what the
total counts beyond the two), ``output = output + reasoning``. A session without a model or tokens
gives no row.

The newest total wins as Droid's does (:mod:`traceflow.importers.droid`): the row's id is
``stable_id("goose-session", id)``, the lake keeps the copy with the largest total, and a running
total never shrinks. The database is read whole each time, with its write-ahead log
(:mod:`traceflow.importers.session_db`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.files import databases_under, default_paths
from traceflow.importers.session_db import table_rows
from traceflow.rows import Parsed, Row, Tokens, iso_micros, stable_id

SOURCE = "goose-db"
AGENT = "goose"
_COLUMNS = (
    "id",
    "model_config_json",
    "provider_name",
    "created_at",
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "accumulated_total_tokens",
    "accumulated_input_tokens",
    "accumulated_output_tokens",
)


def _micros(value: Any) -> int | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int((value if value > 1e12 else value * 1000) * 1000)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if len(text) == 10:
            text += "T00:00:00"
        return iso_micros(text)
    return None


def _positive(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def session_row(values: dict[str, Any], seq: int) -> Row | None:
    """The row of one ``sessions`` row (None: no model or no tokens); ValueError: a bad time."""
    try:
        config_json = json.loads(values.get("model_config_json") or "null")
    except ValueError:
        config_json = None
    model = config_json.get("model_name") if isinstance(config_json, dict) else None
    if not isinstance(model, str) or not model:
        return None
    inp = _positive(values.get("accumulated_input_tokens")) or _positive(values.get("input_tokens")) or 0
    out = _positive(values.get("accumulated_output_tokens")) or _positive(values.get("output_tokens")) or 0
    total = _positive(values.get("accumulated_total_tokens")) or _positive(values.get("total_tokens"))
    total = inp + out if total is None else total
    if not (inp or out or total):
        return None
    when = _micros(values.get("created_at"))
    if when is None:
        raise ValueError(f"session {values.get('id')!r} without created_at")
    reasoning = max(0, total - inp - out)
    session = str(values["id"])
    provider = values.get("provider_name")
    attrs: dict[str, Any] = {"session_total": True}
    if isinstance(provider, str):
        attrs["provider"] = provider
    return {
        "event_id": stable_id("goose-session", session),
        "source": SOURCE,
        "agent": AGENT,
        "session_id": session,
        "parent_session_id": None,
        "ended_at": when,
        "model": model,
        **Tokens(inp, None, None, out + reasoning).columns(),
        "reasoning_tokens": reasoning,
        "seq": seq,
        "attributes": attrs,
    }


class GooseImporter:
    """One row per Goose session from its database (whole file each time)."""

    name: ClassVar[str] = "goose"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return databases_under(root, "sessions.db")

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        table_rows(data, ctx, out, "sessions", _COLUMNS, session_row, "Goose session")
        return out


IMPORTER = GooseImporter()
