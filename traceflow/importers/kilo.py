"""Kilo CLI (Kilo-Org/kilocode, an OpenCode fork) message database: ``$KILO_DATA_DIR/kilo.db``, else
``~/.local/share/kilo/kilo.db`` (sources and versions in tests/data/SOURCES.md).

The database is OpenCode's (:mod:`traceflow.importers.opencode`): table ``message`` (``id``,
``session_id``, ``data``: an OpenCode message record) and table ``session`` (``parent_id`` of a
sub-agent's session), with the same token split (``tokens.input`` cold, ``tokens.cache.read`` /
``.write``, ``tokens.output`` without ``tokens.reasoning``). Rows are read by the same code, with
``agent = 'kilo'``, ``source = 'kilo-db'`` and ids of their own; a Kilo message needs
``role: "assistant"`` and a model, not a provider (as ccusage reads it).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from traceflow.importers.base import FileContext
from traceflow.importers.files import databases_under, default_paths
from traceflow.importers.opencode import database_of_log, database_rows
from traceflow.rows import Parsed


class KiloImporter:
    """Rows from Kilo CLI's database (whole file each time)."""

    name: ClassVar[str] = "kilo"
    whole_file: ClassVar[bool] = True

    def default_paths(self) -> list[Path]:
        return default_paths(self.name)

    def discover(self, root: Path) -> list[Path]:
        return databases_under(root, "kilo*.db")

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        if ctx.plain.name.endswith(".db-wal"):
            database_of_log(ctx, out, kilo=True)
        else:
            database_rows(data, ctx, out, kilo=True)
        return out


IMPORTER = KiloImporter()
