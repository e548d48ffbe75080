"""Engines other than the embedded DuckDB that run the same packaged queries over the same lake:
Spark (local mode, a master URL or Spark Connect), the DuckDB SQL translated through a syntax tree
(``traceflow.engines.rewrite``)."""
