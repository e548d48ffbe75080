"""``traceflow prices``: the price table in force, and its refresh from LiteLLM's price file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traceflow.cli.options import FormatOpt, PricesOpt, echo
from traceflow.errors import UsageError

ACTIONS = ("show", "update")


def prices(
    action: Annotated[str, typer.Argument(help="show, or update FILE.")] = "show",
    file: Annotated[
        Path | None,
        typer.Argument(help="update: LiteLLM's model_prices_and_context_window.json.", show_default=False),
    ] = None,
    extra: PricesOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Show the price table in force, or refresh it from LiteLLM's model_prices_and_context_window.json.

    `update FILE` writes the user's price table ($TRACEFLOW_PRICES, else
    ~/.config/traceflow/prices.json), which every priced report then reads over the built-in list.
    """
    from traceflow import config
    from traceflow.output import Rows
    from traceflow.prices import PriceModel

    if action not in ACTIONS:
        raise UsageError(f"unknown action {action!r}; use one of: {', '.join(ACTIONS)}")
    if action == "update":
        from traceflow.importers.litellm_prices import update

        if file is None:
            raise UsageError(
                "prices update needs LiteLLM's price file: traceflow prices update "
                "model_prices_and_context_window.json"
            )
        summary = update(file.expanduser(), config.prices_file())
        if fmt == "json":
            echo(summary, fmt)
        else:
            echo(Rows(["key", "value"], list(summary.items())), fmt)
        return
    if file is not None:
        raise UsageError("prices show takes no file; pass --prices FILE to see a price file over the table")
    pm = PriceModel.load(extra)
    if fmt == "json":
        echo(pm.as_dict(), fmt)
        return
    typer.echo(f"Prices: {pm.describe()} (USD per million tokens; table file {config.prices_file()}).")
    rows = []
    for name, p in [*sorted(pm.models.items()), ("(default)", pm.default)]:
        read, write, write_1h = pm.cache_rates(p)
        rows.append((name, p.input, p.output, read * 1e6, write * 1e6, write_1h * 1e6))
    echo(Rows(["model", "input", "output", "cache_read", "cache_write", "cache_write_1h"], rows), fmt)


COMMANDS = {"prices": prices}
