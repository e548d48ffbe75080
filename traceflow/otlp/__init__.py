"""OTLP: decoding export requests (protobuf and JSON) and mapping each agent's logs, spans and
metrics to lake rows. Shared by the collectors and the ``otlp-json`` importer."""
