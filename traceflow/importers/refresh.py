"""Bring a lake's local agent logs up to date before a read command answers (``docs/freshness.md``).

Which lakes import local agent logs, and how a change is noticed with one ``stat`` per file, is
:mod:`traceflow.store.local_logs`. This module does the import: the same :func:`run_import` as
``traceflow import``, over the recorded roots, so a file that has not changed is skipped on its size
and mtime, and a file that grew is read from where the last import stopped (only the new bytes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from traceflow import importers
from traceflow.importers import claude_code_usage
from traceflow.importers.run import ImportSummary, run_import
from traceflow.store import local_logs
from traceflow.store.lake import Lake


def default_sources() -> dict[str, list[str]]:
    """The agents' default log folders that exist on this machine (what the default lake reads)."""
    out: dict[str, list[str]] = {}
    for name in local_logs.AGENTS:
        roots = importers.get(name).default_paths()
        if roots:
            out[name] = [str(r.resolve()) for r in roots]
    return out


def folders(roots: Sequence[Path]) -> dict[str, int]:
    """The folders under ``roots`` with their mtimes, taken before an import lists them: pass them
    to :func:`remember` once the import has succeeded (see :func:`local_logs.directories`)."""
    return local_logs.directories(str(r.resolve()) for r in roots)


def remember(lake: Lake, source: str, roots: Sequence[Path], dirs: dict[str, int]) -> None:
    """Record that ``traceflow import source roots`` ran on ``lake`` (agent sources only): later read
    commands refresh from these roots. ``dirs``: :func:`folders` of the roots, taken before the import."""
    if source not in local_logs.AGENTS or not roots:
        return
    marker = local_logs.read_marker(lake.state_dir)
    sources = local_logs.sources_of(marker)
    known = sources.setdefault(source, [])
    known += [text for r in roots if (text := str(r.resolve())) not in known]
    recorded = marker.get("dirs")
    kept = {k: v for k, v in recorded.items() if isinstance(v, int)} if isinstance(recorded, dict) else {}
    kept.update(dirs)
    local_logs.write_marker(lake.state_dir, sources, kept)


def refresh(lake: Lake, *, default_lake: bool = False) -> list[ImportSummary]:
    """Import what is new in the local agent logs ``lake`` imports (the recorded roots; on the
    default lake also the agents' default folders); nothing when they have not changed.

    Returns one summary per source read (``files_read``, ``bytes_read``: what was read).
    """
    marker = local_logs.read_marker(lake.state_dir) if _state_exists(lake) else {}
    sources = local_logs.sources_of(marker)
    if default_lake:
        for name, roots in default_sources().items():
            known = sources.setdefault(name, [])
            known += [r for r in roots if r not in known]
    if not sources:
        return []
    found = local_logs.changes(lake.state_dir) if marker else None
    ledger = set(sources) == {"claude-code"} and lake.url is None  # see _keep_ledger_covered
    before = claude_code_usage.requests_signature(str(lake.root)) if ledger else ""
    if found is not None and sources == local_logs.sources_of(marker) and not found[0]:
        # no file added or removed: read only the files that changed (one stat each found them)
        summaries = [
            run_import(lake, importers.get(name), files=[Path(f) for f in changed])
            for name, changed in found[1].items()
            if changed
        ]
        if ledger:
            _keep_ledger_covered(lake, before)
        return summaries
    all_roots = [r for roots in sources.values() for r in roots]
    dirs = local_logs.directories(all_roots)  # before the import lists them: see directories()
    summaries = []
    for name, roots in sources.items():
        importer = importers.get(name)
        files = [f for r in roots if os.path.exists(r) for f in importer.discover(Path(r))]
        if files:
            summaries.append(run_import(lake, importer, files=files))
    lake.ensure()
    local_logs.write_marker(lake.state_dir, sources, dirs)
    if ledger:
        _keep_ledger_covered(lake, before)
    return summaries


def _keep_ledger_covered(lake: Lake, before: str) -> None:
    """A refresh of Claude Code transcripts alone wrote the lake: the usage ledger
    (:mod:`traceflow.importers.claude_code_usage`) still speaks for it if it did before."""
    after = claude_code_usage.requests_signature(str(lake.root))
    claude_code_usage.record_refresh(str(lake.root), str(lake.state_dir), before, after)


def _state_exists(lake: Lake) -> bool:
    return lake.url is not None or lake.state_dir.is_dir()
