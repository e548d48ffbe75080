#!/usr/bin/env bash
# Install the outside tools some tests drive, so that the plain test command runs every test:
#
#   bash scripts/install_test_tools.sh && python3 -m pytest
#
# * the real Claude Code CLI, pinned 2.1.332 (scripts/install_claude_code.sh, into .ci/cache/claude-code):
#   tests/test_claude_code_e2e.py;
# * ccusage, pinned 20.0.24 (scripts/install_ccusage.sh, into .ci/cache/ccusage): tests/test_ccusage_oracle.py;
# * NVIDIA AIPerf, pinned 0.13.0, in its own virtual environment (scripts/install_aiperf.sh, into
#   .ci/cache/aiperf-venv): tests/test_aiperf_consumer.py;
# * Debian's chromium and chromium-driver (apt; with sudo when not root): tests/test_report_browser.py;
# * Debian's prometheus (apt; /usr/bin/prometheus, started by the test itself):
#   tests/test_collectors_prometheus.py.
#
# Without them those tests skip locally; in CI (.ci/run sets CI=1) they fail instead, never skip.
# Idempotent: what is installed already is kept. The tests find the CLI and AIPerf where these scripts
# put them (.ci/cache); TRACEFLOW_CLAUDE_BIN, TRACEFLOW_CCUSAGE_BIN and TRACEFLOW_AIPERF_PYTHON point
# them elsewhere.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'install_test_tools: %s\n' "$*" >&2; }

log "Claude Code CLI (pinned) ..."
claude="$(bash "$ROOT/scripts/install_claude_code.sh")"
log "  $claude"

log "ccusage (pinned) ..."
ccusage="$(bash "$ROOT/scripts/install_ccusage.sh")"
log "  $ccusage"

log "AIPerf (pinned, own venv) ..."
aiperf_python="$(bash "$ROOT/scripts/install_aiperf.sh")"
log "  $aiperf_python"

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  log "chromium and chromium-driver (apt) ..."
  sudo=()
  if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
log "  $(command -v chromium) $(command -v chromedriver)"

if [ ! -x /usr/bin/prometheus ] && command -v apt-get >/dev/null; then
  log "prometheus (apt; the binary only, its service is not started) ..."
  sudo=()
  if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
log "  $(command -v prometheus || echo 'prometheus: not installed')"
