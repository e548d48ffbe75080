"""Replay workloads: prefix derivation, exports to serving-benchmark formats, workload fit and
synthesis, and OTLP load generation."""
