"""Packaged .sql files; read them through traceflow.sql."""
