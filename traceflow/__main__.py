"""``python -m traceflow``: the same as the ``traceflow`` command (result cache first, then the CLI)."""

from traceflow._entry import main

main()
