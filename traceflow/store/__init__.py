"""The store: the Parquet lake and its DuckDB views, the packaged-query loader, users' SQL, the
request selection, and the result cache for repeated reports."""
