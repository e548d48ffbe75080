#!/usr/bin/env bash
# Install ccusage (pinned) for tests/test_ccusage_oracle.py and print the path of its command.
#
#   bash scripts/install_ccusage.sh          # -> /path/to/ccusage on stdout, progress on stderr
#
# Where:    $TRACEFLOW_CCUSAGE_DIR, default <repo>/.ci/cache/ccusage (git-ignored)
# Version:  20.0.24, pinned: the oracle test compares traceflow's daily/weekly/monthly/session/blocks
#           documents with this version's `--json` output key by key (docs/ccusage.md).
# Needs:    Node.js 20 or newer and npm.
#
# Idempotent: an install that already reports the pinned version is kept. Installs go to a staging
# dir first and are renamed into place, under a lock, so concurrent runs are safe.
set -euo pipefail

VERSION=20.0.24
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${TRACEFLOW_CCUSAGE_DIR:-$REPO/.ci/cache/ccusage}"

# shellcheck source=npm_pinned.sh
source "$REPO/scripts/npm_pinned.sh"

# The command of an install in $1, if it runs and reports the pinned version.
find_binary() {
    local cand="$1/node_modules/.bin/ccusage" out
    [[ -x "$cand" ]] || return 1
    out="$("$cand" --version 2>/dev/null | tail -n 1)" || return 1
    [[ "$out" == *"$VERSION"* ]] || return 1
    (cd "$(dirname "$cand")" && printf '%s/%s\n' "$(pwd -P)" "$(basename "$cand")")
}

npm_pinned "$DIR" "ccusage@$VERSION" traceflow-ccusage "pinned ccusage for the traceflow oracle test"
printf '%s\n' "$BIN"
