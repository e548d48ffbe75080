"""The ``traceflow`` command: the typer app, the table of its commands, and the entry point.

Each command module (:mod:`traceflow.cli.lake`, :mod:`~traceflow.cli.serve`,
:mod:`~traceflow.cli.analyses`, ...) defines plain functions and lists them in its ``COMMANDS``; this
module registers them on :data:`app`. Only the module of the command being run is imported (a quick
``traceflow mix``); ``--help`` and anything not in the table load them all.

Library errors (:mod:`traceflow.errors`) become a one-line message on stderr: exit status 2 for a
usage problem, 1 for anything else. ``traceflow import`` exits 3 when it skipped bad records.
"""

from __future__ import annotations

import sys

import typer

from traceflow.errors import TraceflowError, UsageError

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Token-traffic analytics for AI agents: collect, store, analyse, replay, size.",
)


def _print_version(value: bool) -> None:
    if value:
        from traceflow import __version__

        typer.echo(f"traceflow {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print traceflow's version and exit.", is_eager=True, callback=_print_version
    ),
) -> None:
    # A callback keeps the app a group of commands when only one of them is registered.
    pass


#: Every command, in the order ``--help`` lists them, and the module of ``traceflow.cli`` that defines it.
COMMANDS: dict[str, str] = {
    "import": "lake",
    "mix": "lake",
    "sql": "lake",
    "compact": "lake",
    "snapshot": "lake",
    "status": "lake",
    "serve": "serve",
    "quarantine": "quarantine",
    "version": "lake",
    "gaps": "analyses",
    "ttl": "analyses",
    "sessions": "analyses",
    "load": "analyses",
    "working-set": "analyses",
    "report": "analyses",
    "query": "analyses",
    "queries": "analyses",
    "dashboard": "dashboards",
    "demo": "dashboards",
    "models": "sizing",
    "size": "sizing",
    "simulate": "sizing",
    "export": "replay",
    "fit": "replay",
    "synth": "replay",
    "misses": "cache",
    "timeline": "cache",
    "compare": "cache",
    "check": "cache",
    "daily": "usage",
    "weekly": "usage",
    "monthly": "usage",
    "session": "usage",
    "blocks": "blocks",
    "statusline": "statusline",
    "prices": "prices",
}

_registered: set[str] = set()


def register(*names: str) -> None:
    """Register the named commands on :data:`app` (each once), importing only their modules.

    Registration follows :data:`COMMANDS`' order, so ``--help`` lists the commands the same way
    whichever were registered first.
    """
    wanted = set(names) - _registered
    unknown = wanted - COMMANDS.keys()
    if unknown:
        raise ValueError(f"no such command: {', '.join(sorted(unknown))}")
    for name, module_name in COMMANDS.items():
        if name in wanted:
            # __import__, not importlib: `python -X importtime` reports imports made this way
            module = __import__(f"traceflow.cli.{module_name}", fromlist=["COMMANDS"])
            app.command(name)(module.COMMANDS[name])
            _registered.add(name)
    order = list(COMMANDS)
    app.registered_commands.sort(key=lambda c: order.index(c.name) if c.name in order else len(order))


def register_all() -> None:
    """Register every command (``--help``, the docs and the tests)."""
    register(*COMMANDS)


def _suggest(command: str | None) -> None:
    """For a word that is no command, exit 2 naming the nearest commands (``day``: ``daily``)."""
    if command is None or command.startswith("-"):
        return
    import difflib

    close = difflib.get_close_matches(command, COMMANDS, n=3, cutoff=0.6)
    close += [c for c in COMMANDS if c.startswith(command) and c not in close]
    if close:
        hint = " or ".join(f"`traceflow {c}`" for c in close[:3])
        typer.echo(f"traceflow: error: no such command {command!r}; did you mean {hint}?", err=True)
        sys.exit(2)


def main() -> None:
    """Console-script entry point: run the app, turning traceflow errors into one-line messages."""
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if sys.argv[1:] == ["--version"]:  # answered before any command module is imported
        from traceflow import __version__

        typer.echo(f"traceflow {__version__}")
        sys.exit(0)
    if command in COMMANDS:
        register(command)
    else:
        _suggest(command)
        register_all()
    try:
        code = app(standalone_mode=False)  # returns the code of a typer.Exit instead of raising it
    except TraceflowError as e:
        typer.echo(f"traceflow: error: {e}", err=True)
        sys.exit(2 if isinstance(e, UsageError) else 1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Exception as e:
        # Usage errors of typer's (vendored) click: bad options, missing arguments.
        show = getattr(e, "show", None)
        if callable(show) and isinstance(getattr(e, "exit_code", None), int):
            show()
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        raise
    sys.exit(code if isinstance(code, int) else 0)
