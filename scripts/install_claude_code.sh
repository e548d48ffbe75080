#!/usr/bin/env bash
# Install the real Claude Code CLI (pinned) for the end-to-end tests and print the path of its binary.
#
#   bash scripts/install_claude_code.sh          # -> /path/to/claude on stdout, progress on stderr
#
# Where:    $TRACEFLOW_CLAUDE_DIR, default <repo>/.ci/cache/claude-code (git-ignored)
# Version:  2.1.332, pinned. On Node 20 an unpinned `npm install @anthropic-ai/claude-code` silently
#           picks 2.1.197 (2.1.198+ declare engines node>=22); the pinned install only warns
#           EBADENGINE. The CLI itself is a native (Bun-compiled) ELF from the optional dependency
#           @anthropic-ai/claude-code-<platform>; it needs glibc, not Node.
# Cost:     ~14 s and ~180 MB of downloads cold; 384 MB on disk. With npm's cache warm
#           ($npm_config_cache, default ~/.npm) still ~11 s (unpacking dominates), so in CI keep the
#           install dir itself between runs: then this script only checks `claude --version` (~0.1 s).
#
# Idempotent: when the install dir already holds a working claude of the pinned version it only
# prints the path. A broken or partial install is replaced; installs go to a staging dir first and
# are renamed into place, under a lock, so concurrent runs are safe.
set -euo pipefail

VERSION=2.1.332
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${TRACEFLOW_CLAUDE_DIR:-$REPO/.ci/cache/claude-code}"

# shellcheck source=npm_pinned.sh
source "$REPO/scripts/npm_pinned.sh"
# `claude --version` runs with a throw-away HOME/config/tmp so it writes nothing anywhere else.
PROBE_HOME="$(mktemp -d)"
TEMPORARY+=("$PROBE_HOME")

TIMEOUT=()
if command -v timeout >/dev/null; then TIMEOUT=(timeout 60); fi

# The binary of an install in $1, if it runs and reports the pinned version.
find_binary() {
    local root="$1" cand
    for cand in "$root/node_modules/.bin/claude" "$root"/node_modules/@anthropic-ai/claude-code-*/claude; do
        # .bin/claude is the native binary after postinstall, a 500-byte stub that only prints an
        # error when scripts were off; the platform package's binary works either way.
        [[ -x "$cand" ]] || continue
        if out="$(HOME="$PROBE_HOME" CLAUDE_CONFIG_DIR="$PROBE_HOME/.claude" TMPDIR="$PROBE_HOME" \
            CLAUDE_CODE_TMPDIR="$PROBE_HOME" XDG_RUNTIME_DIR="$PROBE_HOME" DISABLE_AUTOUPDATER=1 \
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 "${TIMEOUT[@]}" "$cand" --version 2>/dev/null)" \
            && [[ "$out" == "$VERSION "* ]]; then
            (cd "$(dirname "$cand")" && printf '%s/%s\n' "$(pwd -P)" "$(basename "$cand")")
            return 0
        fi
    done
    return 1
}

install_hint() {
    log "(the native binary comes from the optional dependency @anthropic-ai/claude-code-<platform>;"
    log " check that optional dependencies are not omitted: npm_config_omit / --omit=optional)"
}

npm_pinned "$DIR" "@anthropic-ai/claude-code@$VERSION" traceflow-claude-code \
    "pinned Claude Code CLI for the traceflow e2e tests"
rm -rf "$DIR/.probe-config"
printf '%s\n' "$BIN"
