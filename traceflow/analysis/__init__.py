"""Analyses over the lake: token mix, idle gaps, cache TTLs, sessions, load, KV working set and the
report that gathers them. Each returns polars frames or plain dicts; none prints."""
