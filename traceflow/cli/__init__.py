"""The ``traceflow`` command line: a typer app, shared option bundles and one thin module per
command group. Nothing in the library imports this package."""
