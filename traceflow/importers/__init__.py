"""File importers, one module per source; ``get(name)`` loads one by its CLI name."""

from __future__ import annotations

import importlib

from traceflow.errors import UnknownSource

TYPE_CHECKING = False  # typing is not imported at run time (the usage ledger's fast path)
if TYPE_CHECKING:  # the importers' modules import it; the usage ledger needs none of it
    from traceflow.importers.base import Importer

#: CLI name -> module that defines ``IMPORTER``.
REGISTRY: dict[str, str] = {
    "claude-code": "claude_code",
    "codex": "codex",
    "gemini": "gemini",
    "opencode": "opencode",
    "qwen": "qwen",
    "amp": "amp",
    "copilot": "copilot",
    "kimi": "kimi",
    "codebuff": "codebuff",
    "kilo": "kilo",
    "pi": "pi",
    "openclaw": "openclaw",
    "grok": "grok",
    "droid": "droid",
    "goose": "goose",
    "hermes": "hermes",
    "zcode": "zcode",
    "antigravity": "antigravity",
    "otlp-json": "otlp_json",
    "mooncake": "mooncake",
    "azure": "azure",
    "kvcache-tester": "kvcache_tester",
    "bailian": "bailian",
    "burstgpt": "burstgpt",
    "tracelab": "tracelab",
    "clickhouse-otel": "clickhouse_otel",
}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Importer:
    """The importer called ``name``; :class:`UnknownSource` lists the known ones otherwise."""
    module = REGISTRY.get(name)
    if module is None:
        raise UnknownSource(f"no importer called {name!r}; choose one of: {', '.join(REGISTRY)}")
    imported = importlib.import_module(f"{__name__}.{module}")
    importer: Importer = imported.IMPORTER
    return importer
