"""OTLP receivers (HTTP and gRPC) that write to the lake."""
