"""Replay workloads: prefix derivation, exports to serving-benchmark formats, workload fit and
synthesis, and OTLP load generation.

Modules, in the order data flows through them:

- ``requests``: the selected requests of a lake in replay order (what every stage starts from).
- ``prefix``: ``hash_ids`` derived from token counts and timing; ``source_ids`` keeps the ids of
  sources that have them; ``hash_ids`` holds the resulting plan and the rules ids obey;
  ``arrays``: the numpy run/group helpers they share.
- ``export``: selection -> plan -> a format writer (``mooncake``, ``aiperf``, ``kvcache_tester``,
  sharing ``writing``) -> manifest.
- ``workload``: the profile document and its distributions; ``fit`` fits one to a selection;
  ``synth`` generates a trace from one (or a preset); ``synth_trace`` holds that trace and writes it
  into a lake.
- ``loadgen``: a trace sent as Claude-Code-shaped OTLP logs (``synth --send``).
"""
