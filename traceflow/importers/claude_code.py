"""Claude Code's local JSONL transcripts: ``~/.claude/projects/<project>/<session>.jsonl``.

One API response is written as one ``assistant`` line per content block, each repeating the whole
``usage`` (docs/schemas.md#claude-code); before v2.1.97 the early copies carry a placeholder
``output_tokens``. We keep one row per ``(requestId, message.id)``: the most complete copy (largest
token total, then the last written). The lake's views apply the same rule across imports, so the
result does not depend on line order or on how a growing file was split between imports.

* ``event_id`` is derived from ``requestId`` alone (``stable_id("anthropic-request", id)``), the key
  the OTLP ``api_request`` event of the same request carries, so a transcript line and its OTLP
  event count once. Lines without ``requestId`` fall back to ``message.id``.
* ``<synthetic>`` lines (failed calls, zero usage) are not requests; they become ``api_error`` events.
* The cache write is ``cache_creation_input_tokens``, or the 5m + 1h breakdown's sum where that is 0
  beside a non-zero breakdown (old versions): :func:`traceflow.rows.anthropic_cache_write`, the rule
  the OTLP mapper and the status line share.
* Sub-agent transcripts (``<session>/subagents/agent-<id>.jsonl``, ``isSidechain``) become their own
  session ``agent-<id>`` with ``parent_session_id`` = the spawning session.
* ``prompt_id`` is the ``promptId`` of the user line that started the turn (tool-result lines and
  sub-agents carry the same id); older versions without ``promptId`` use that user line's ``uuid``.
* ``ended_at`` is the kept line's write time. The transcript has no request start; ``started_at`` is
  the write time of the user or tool-result line that triggered the request (flagged
  ``started_at_estimated`` in ``attributes``), else the first block's write time.

The work is split by responsibility: this module is the importer (where the transcripts are);
:mod:`~traceflow.importers.claude_code_records` declares the lines as typed msgspec structs (every
line is fully validated; a malformed one is reported as ``path:line: what is wrong`` and skipped),
:mod:`~traceflow.importers.claude_code_lines` reads lines, :mod:`~traceflow.importers.claude_code_rows`
turns one line into a row or a line tuple, :mod:`~traceflow.importers.claude_code_frames` turns a
batch into frames.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.claude_code_frames import events_frame, requests_frame
from traceflow.importers.claude_code_lines import read_lines
from traceflow.importers.claude_code_rows import SOURCE
from traceflow.importers.compressed import with_compressed
from traceflow.rows import Parsed
from traceflow.store import local_logs

_NAMES = with_compressed((".jsonl",))  # transcripts, plain or compressed
_IGNORED_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)  # as pathlib ignores them


def _jsonl_files(root: Path) -> list[Path]:
    """``sorted(p for p in root.rglob("*.jsonl") if p.is_file())`` with one ``scandir`` per folder.

    As ``rglob``: folders are entered but not through symbolic links, unreadable ones are skipped;
    as ``Path.is_file``: a link counts when it leads to a regular file.
    """
    found: list[Path] = []
    folders = [str(root)]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except PermissionError:
            continue
        for entry in entries:
            name = entry.name
            if name.endswith(_NAMES):
                path = Path(folder, name)
                try:
                    regular = path.is_file() if entry.is_symlink() else entry.is_file(follow_symlinks=False)
                except OSError:
                    regular = path.is_file()
                if regular:
                    found.append(path)
            try:
                folder_entry = entry.is_dir(follow_symlinks=False)
            except OSError as e:
                if e.errno not in _IGNORED_ERRNOS:
                    raise
                folder_entry = False
            if folder_entry:
                folders.append(os.path.join(folder, name))
    return sorted(found)


class ClaudeCodeImporter:
    name: ClassVar[str] = "claude-code"
    whole_file: ClassVar[bool] = False
    source: ClassVar[str] = SOURCE

    def default_paths(self) -> list[Path]:
        return [Path(p) for p in local_logs.default_folders(self.name)]

    def discover(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return _jsonl_files(root)

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        """Rows from complete lines; assistant lines are kept in ``out.raw`` until :meth:`finish`."""
        out = Parsed()
        path = str(ctx.path)
        # A sub-agent transcript lives in <session>/subagents/agent-<id>.jsonl.
        stem = ctx.plain.stem
        file_agent = stem[len("agent-") :] if stem.startswith("agent-") else None
        acc: list[tuple[Any, ...]] = []  # one tuple per assistant block line, see COLUMNS
        no = read_lines(data, ctx.first_line - 1, out, acc, path, file_agent, ctx.state)
        # ``no`` counted a last line without its newline too.
        ctx.next_line = no + 1 if not data or data[-1] == 10 else no
        if acc or out.events:
            out.raw.append((path, acc))
        return out

    def finish(self, parsed: Parsed) -> None:
        """Build one requests frame from every file's block lines, and one events frame."""
        raw: list[tuple[str, list[tuple[Any, ...]]]] = parsed.raw
        frame = requests_frame(raw)
        raw.clear()
        parsed.frames.setdefault("requests", []).append(frame)
        if parsed.events:
            parsed.frames.setdefault("events", []).append(events_frame(parsed.events))
            parsed.events.clear()


IMPORTER = ClaudeCodeImporter()
