"""``python -m traceflow``: the same as the ``traceflow`` command."""

from .cli import main

main()
