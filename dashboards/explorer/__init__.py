"""The shared explorer behind ``traceflow dashboard`` (docs/everyday.md, "traceflow dashboard").

:mod:`.access` signs viewers in with the tokens file of ``serve --tokens`` and says which team's rows
each may read; :mod:`.api` answers the JSON endpoints with what the CLI prints in ``--format json``;
:mod:`.views` turns the page's filters (kept in the URL) into the API's parameters; :mod:`.pages`
and :mod:`.charts` are the HTML pages and their Vega-Lite charts; :mod:`.app` puts them together
as one Starlette application.
"""
