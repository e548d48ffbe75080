"""Factory Droid CLI session settings: ``$DROID_SESSIONS_DIR/<workspace>/<sessionId>.settings.json``,
else under ``~/.factory/sessions`` (sources and versions in tests/data/SOURCES.md).

Droid keeps each session's transcript in ``<sessionId>.jsonl`` and, beside it, a settings object that
it **rewrites** as the session runs: ``{model, providerLock, providerLockTimestamp, tokenUsage:
{inputTokens, outputTokens, cacheCreationTokens, cacheReadTokens, thinkingTokens}}``, the session's
running totals. No file records a request's usage, so each settings file becomes **one row standing
for the whole session** (like Copilot CLI's, store/recorded.py: the per-request analyses leave
``agent = 'droid'`` out), at ``providerLockTimestamp`` (else the file's modification time).

**The newest total wins.** The row's id is ``stable_id("droid-session", sessionId)``: every rewrite of
the file gives a row with the same id, and the lake keeps one row per id, the most complete first
(the largest ``total_tokens``; store/measures.py ``dedup_order``), then the newest import. A running
total never shrinks, so the newest total is the one kept and the older copies count nowhere; an id
per rewrite would add the totals of every rewrite up.

Token split (Anthropic's, as ccusage 20.0.24 reads it): ``cold = inputTokens``, ``read =
cacheReadTokens``, ``write = cacheCreationTokens``, ``output = outputTokens + thinkingTokens``
(billed as output), ``reasoning = thinkingTokens``. The model is ``model`` with Droid's custom-model
decoration taken off (``custom:`` prefix, ``[...]`` labels; lower case, dots and spaces as dashes).
A file without tokens gives no row; one that is not a JSON object is an error.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.counts import count
from traceflow.importers.files import default_paths, files_under
from traceflow.rows import LineError, Parsed, Tokens, iso_micros, stable_id

SOURCE = "droid-settings"
AGENT = "droid"
SUFFIX = ".settings.json"


def model_name(raw: str) -> str:
    """Droid's model label as a model name: ``custom:Claude-Sonnet-4.5-[Anthropic]`` is
    ``claude-sonnet-4-5``."""
    name = re.sub(r"\[[^\]]*\]", "", raw.removeprefix("custom:")).strip().lower()
    return re.sub(r"[-.\s]+", "-", name).strip("-")


def _count(usage: dict[str, Any], key: str) -> int:
    return count(usage, key, "tokenUsage") or 0


class DroidImporter:
    """One row per Droid session from its settings file (whole file each time: Droid rewrites it)."""

    name: ClassVar[str] = "droid"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, f"*{SUFFIX}*", (SUFFIX,))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        try:
            self._settings(data, ctx, out)
        except ValueError as exc:
            out.errors.append(LineError(str(ctx.path), 1, str(exc)))
        return out

    @staticmethod
    def _settings(data: bytes, ctx: FileContext, out: Parsed) -> None:
        settings = json.loads(data)
        if not isinstance(settings, dict):
            raise ValueError("settings is not a JSON object")
        usage = settings.get("tokenUsage")
        if not isinstance(usage, dict):
            return
        cold, output = _count(usage, "inputTokens"), _count(usage, "outputTokens")
        write, read = _count(usage, "cacheCreationTokens"), _count(usage, "cacheReadTokens")
        thinking = _count(usage, "thinkingTokens")
        if not (cold or output or write or read or thinking):
            return
        session = ctx.plain.name.removesuffix(SUFFIX)
        stamp = settings.get("providerLockTimestamp")
        try:
            when = iso_micros(stamp) if isinstance(stamp, str) and stamp else None
        except ValueError as exc:
            raise ValueError(f"bad providerLockTimestamp {stamp!r}") from exc
        if when is None:
            when = os.stat(ctx.path).st_mtime_ns // 1000
        raw = settings.get("model")
        provider = settings.get("providerLock")
        out.requests.append(
            {
                "event_id": stable_id("droid-session", session),
                "source": SOURCE,
                "agent": AGENT,
                "session_id": session,
                "parent_session_id": None,
                "ended_at": when,
                "model": model_name(raw) if isinstance(raw, str) and raw.strip() else None,
                **Tokens(cold, read, write, output + thinking).columns(),
                "reasoning_tokens": thinking,
                "seq": 1,
                "attributes": {
                    "session_total": True,
                    **({"provider": provider} if isinstance(provider, str) else {}),
                    **({"model_label": raw} if isinstance(raw, str) else {}),
                },
            }
        )


IMPORTER = DroidImporter()
