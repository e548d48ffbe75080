# syntax=docker/dockerfile:1
# The traceflow image: `docker build -t traceflow:0.1.0 .` (docs/deploying.md).
# Stage 1 builds the traceflow wheel and a wheel of every dependency (the s3 extra included);
# stage 2 installs them from those wheels alone (--no-index), so nothing is fetched after the build
# stage and nothing at all when a container starts. It runs as an unprivileged user (uid 10001).
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# What the wheel is made of (pyproject.toml's packages and package-data; traceflow/collectors,
# traceflow/dashboards and traceflow/queries are links to the top-level folders).
COPY pyproject.toml README.md ./
COPY traceflow ./traceflow
COPY collectors ./collectors
COPY dashboards ./dashboards
COPY queries ./queries
RUN python -m pip wheel --wheel-dir /wheels ".[s3]"

FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    HOME=/home/traceflow TRACEFLOW_DATA=/var/lib/traceflow/lake
# The wheels come from the build stage only: no package index is reachable from this install.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links /wheels "traceflow[s3]" \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/traceflow traceflow \
    && mkdir -p /var/lib/traceflow/wal /var/lib/traceflow/lake \
    && chown -R 10001:10001 /var/lib/traceflow
USER 10001:10001
WORKDIR /home/traceflow
# 4317 OTLP/gRPC, 4318 OTLP/HTTP (and /healthz), 8050 the dashboard
EXPOSE 4317 4318 8050
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4318/healthz', timeout=4)"]
ENTRYPOINT ["traceflow"]
# A collector on every interface: a non-loopback bind needs sign-in, here the tokens file (one
# `TEAM TOKEN` pair a line) mounted as a secret; its write-ahead log on the volume at /var/lib/traceflow/wal.
CMD ["serve", "--host", "0.0.0.0", "--tokens", "/run/secrets/traceflow/tokens", "--wal-dir", "/var/lib/traceflow/wal"]
