"""Packaged .sql files; read them through traceflow.store.sql."""
