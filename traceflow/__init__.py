"""traceflow: trace analytics for the token traffic of AI agents.

The library API: :class:`traceflow.lake.Lake` (store and views), :func:`traceflow.importing.run_import`,
:func:`traceflow.mix.token_mix`, :func:`traceflow.sqlrun.run_sql`. Nothing here starts a server or
touches the disk on import.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
