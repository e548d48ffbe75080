#!/usr/bin/env bash
# Install NVIDIA AIPerf (pinned) into its own virtual environment for tests/test_aiperf_consumer.py
# and print that environment's python. Idempotent: an existing install of the pinned version is kept.
# AIPerf pins its own dependency set (about 1.2 GB), so it stays out of traceflow's environment.
set -euo pipefail
VERSION="0.13.0"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${TRACEFLOW_AIPERF_VENV:-$ROOT/.ci/cache/aiperf-venv}"
PY="$VENV/bin/python"
if [ -x "$PY" ] && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('aiperf') != '$VERSION')" 2>/dev/null; then
  echo "$PY"
  exit 0
fi
rm -rf "$VENV"
python3 -m venv "$VENV" >&2
"$PY" -m pip install -q --disable-pip-version-check "aiperf==$VERSION" >"$VENV.log" 2>&1 || { cat "$VENV.log" >&2; exit 1; }
echo "$PY"
