"""KV-cache sizing and simulation. Pure: no store, no DuckDB.

Modules, each importing only those listed before it:
``geometry`` (KV bytes per token from a ``config.json``), ``models`` (the catalogue), ``sizing`` (tiers,
TTFT, SSD endurance), ``trace`` (block traces), ``synthetic`` (the agentic-coding workload), ``lru``
(exact LRU maths), ``engines`` (tier hierarchies replayed), ``simulate`` (config, results, report, sweep).
"""
