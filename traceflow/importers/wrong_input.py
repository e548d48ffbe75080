"""What ``traceflow import`` says when it is given the wrong input: no default location, nothing in
it, no file of the importer's format under a path (naming the importers that do find files there),
and whether a file's first record looks like an agent format that skips unknown lines silently."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from traceflow import importers
from traceflow.errors import UsageError
from traceflow.importers.base import Importer
from traceflow.importers.compressed import CorruptInput, open_input
from traceflow.store import local_logs

#: What each importer reads, for the messages below (the table of sources in docs/collector.md says the same).
READS: dict[str, str] = {
    "claude-code": "Claude Code transcripts (projects/<project>/<session>.jsonl)",
    "codex": "Codex rollouts (sessions/YYYY/MM/DD/rollout-*.jsonl)",
    "gemini": "Gemini CLI chat recordings (tmp/<project>/chats/*.jsonl)",
    "opencode": "OpenCode messages (storage/message/<session>/<message>.json, opencode.db)",
    "qwen": "Qwen Code chat records (projects/<project>/chats/<session>.jsonl)",
    "amp": "Amp thread files (threads/T-<id>.json)",
    "copilot": "GitHub Copilot CLI session events (session-state/<session>/events.jsonl)",
    "kimi": "Kimi wire logs (sessions/<group>/<session>/wire.jsonl)",
    "codebuff": "Codebuff chats (projects/<project>/chats/<chat>/chat-messages.json)",
    "kilo": "the Kilo CLI database (kilo.db)",
    "pi": "pi session files (sessions/<project>/<time>_<session>.jsonl)",
    "openclaw": "OpenClaw transcripts (agents/<agent>/sessions/<session>.jsonl)",
    "grok": "Grok Build CLI session updates (sessions/<project>/<session>/updates.jsonl)",
    "droid": "Droid session settings (sessions/<workspace>/<session>.settings.json)",
    "goose": "the Goose session database (sessions/sessions.db)",
    "hermes": "the Hermes state database (state.db)",
    "zcode": "the ZCode usage database (cli/db/db.sqlite)",
    "antigravity": "Antigravity conversation databases (conversations/<id>.db)",
    "otlp-json": "OTLP/JSON export requests, one per line (*.json, *.jsonl)",
    "mooncake": "Mooncake traces (*.jsonl with timestamp, input_length, output_length, hash_ids)",
    "azure": "Azure LLM inference traces (AzureLLMInferenceTrace_*.csv)",
    "kvcache-tester": "kv-cache-tester sessions (traces/trace_NNNN.json)",
    "bailian": "Alibaba Bailian traces (qwen_*_blksz_16.jsonl)",
    "burstgpt": "BurstGPT traces (BurstGPT_*.csv)",
}

#: Whether the first record of a file looks like the agent formats that ignore unknown lines
#: silently (a file of another format would otherwise import as "no new rows").
LOOKS_LIKE: dict[str, Callable[[dict[str, Any]], bool]] = {
    "claude-code": lambda r: "sessionId" in r or "leafUuid" in r or ("type" in r and "uuid" in r),
    "codex": lambda r: "type" in r and "payload" in r,
    "gemini": lambda r: "sessionId" in r or "messages" in r or ("type" in r and "id" in r),
}


def reads(importer: Importer) -> str:
    return READS.get(importer.name, f"{importer.name} files")


def _other_sources(importer: Importer, root: Path) -> list[str]:
    """The agent importers that do find files under ``root`` (a hint for the message)."""
    out = []
    for name in ("claude-code", "codex", "gemini"):
        if name != importer.name and root.is_dir():
            with contextlib.suppress(Exception):
                if importers.get(name).discover(root):
                    out.append(name)
    return out


def no_default_location(importer: Importer) -> UsageError:
    if importer.name in LOOKS_LIKE or importer.name in local_logs.AGENTS:
        return UsageError(
            f"no {importer.name} logs found in the default location "
            "(see the table of sources in docs/collector.md); "
            f"pass the path of {reads(importer)}: traceflow import {importer.name} PATH"
        )
    return UsageError(
        f"{importer.name} has no default location; pass the path of {reads(importer)}: "
        f"traceflow import {importer.name} PATH"
    )


def nothing_in_default_location(importer: Importer, roots: Sequence[Path]) -> UsageError:
    where = ", ".join(str(r) for r in roots)
    return UsageError(
        f"no {importer.name} logs in {where} (the default location): nothing to import; "
        f"pass the path of {reads(importer)}: traceflow import {importer.name} PATH"
    )


def no_files_of_format(importer: Importer, root: Path) -> UsageError:
    others = _other_sources(importer, root)
    hint = ""
    if others:
        hint = f"; these look like {' or '.join(others)} files: traceflow import {others[0]} {root}"
    return UsageError(
        f"no {importer.name} files under {root}: `import {importer.name}` reads {reads(importer)}; "
        f"pass such a file or folder, or the importer for these files (see `traceflow import --help`){hint}"
    )


def first_record(path: str) -> dict[str, Any] | None:
    """The first non-blank line of a file as a JSON object, or None."""
    try:
        with open_input(path) as fh:
            for line in fh:
                if line.strip():
                    rec = orjson.loads(line)
                    return rec if isinstance(rec, dict) else None
    except (OSError, orjson.JSONDecodeError, CorruptInput):
        return None
    return None
