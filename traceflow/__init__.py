"""traceflow: trace analytics for the token traffic of AI agents.

The library API: :class:`traceflow.store.lake.Lake` (store and views),
:func:`traceflow.importers.run.run_import`, :func:`traceflow.analysis.mix.token_mix`,
:func:`traceflow.store.user_sql.run_sql`. Nothing here starts a server or touches the disk on import.
docs/architecture.md maps the packages.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
