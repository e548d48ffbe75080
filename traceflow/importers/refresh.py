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


def remember(lake: Lake, source: str, roots: Sequence[Path]) -> None:
    """Record, before ``traceflow import source roots`` reads them, that ``lake`` imports these roots
    (agent sources only): later read commands refresh from them. Their directories' mtimes are taken
    now, before the import lists them (see :func:`local_logs.directories`)."""
    if source not in local_logs.AGENTS or not roots:
        return
    lake.ensure()
    marker = local_logs.read_marker(lake.state_dir)
    sources = local_logs.sources_of(marker)
    known = sources.setdefault(source, [])
    added = [str(r.resolve()) for r in roots]
    known += [r for r in added if r not in known]
    dirs = marker.get("dirs")
    kept = {k: v for k, v in dirs.items() if isinstance(v, int)} if isinstance(dirs, dict) else {}
    kept.update(local_logs.directories(added))
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
    if marker and sources == local_logs.sources_of(marker) and local_logs.current(lake.state_dir):
        return []  # nothing changed: one stat per folder and per file
    all_roots = [r for roots in sources.values() for r in roots]
    dirs = local_logs.directories(all_roots)  # before the import lists them: see directories()
    summaries = []
    for name, roots in sources.items():
        importer = importers.get(name)
        present = [Path(r) for r in roots if os.path.exists(r)]
        present = [r for r in present if importer.discover(r)]
        if present:
            summaries.append(run_import(lake, importer, present))
    lake.ensure()
    local_logs.write_marker(lake.state_dir, sources, dirs)
    return summaries


def _state_exists(lake: Lake) -> bool:
    return lake.url is not None or lake.state_dir.is_dir()
