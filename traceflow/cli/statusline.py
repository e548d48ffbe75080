"""``traceflow statusline``: one line for Claude Code's status bar (:mod:`traceflow.cli.status`).

The console script answers ``traceflow statusline`` before typer is imported
(:func:`traceflow.cli.status.fast_path`, called by :mod:`traceflow._entry`); this typer command is
the same thing for ``--help`` and for anything the fast path does not parse.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from traceflow.cli.options import DataOpt, FormatOpt, PricesOpt

TzOpt = Annotated[
    str | None,
    typer.Option("--tz", help="Zone of 'today' (default: $TRACEFLOW_TZ, else UTC).", show_default=False),
]


def statusline(
    data: DataOpt = None, tz: TzOpt = None, prices: PricesOpt = None, fmt: FormatOpt = "table"
) -> None:
    """Print one status line for the Claude Code session whose JSON is on stdin.

    Its cost and reuse ratio today and how long its cache stays warm.

    In Claude Code's settings.json: {"statusLine": {"type": "command", "command": "traceflow statusline"}}
    """
    from traceflow.cli.status import run

    typer.echo(run(sys.stdin.read(), data=_text(data), tz=tz, prices=_text(prices), fmt=fmt))


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


COMMANDS = {"statusline": statusline}
