"""KV-cache sizing: model geometry and the model catalogue, tier sizing and SSD endurance, and the
trace-driven multi-tier cache simulator."""
