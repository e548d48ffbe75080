"""Altair charts as pure functions of polars frames."""
