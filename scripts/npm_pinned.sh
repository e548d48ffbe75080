#!/usr/bin/env bash
# Sourced by the install scripts of pinned npm packages (install_ccusage.sh, install_claude_code.sh):
# the install itself, written once. The sourcing script defines `find_binary DIR` (the command of an
# install in DIR, printed, if it runs and reports the pinned version; else it returns 1), may add
# paths to TEMPORARY (removed on exit, with the staging dir), then calls:
#
#   npm_pinned DIR PACKAGE@VERSION PACKAGE_JSON_NAME DESCRIPTION
#
# which leaves the command in $BIN. When DIR holds no working install, it installs PACKAGE@VERSION
# into a staging dir under a lock (so concurrent runs are safe) and renames it into place; an install
# that then fails find_binary is an error (exit 1, after `install_hint` when the script defines one).
# Progress goes to stderr, each line led by the script's name.
STAGE=""
BIN=""
TEMPORARY=()

log() { printf '%s: %s\n' "$(basename "$0" .sh)" "$*" >&2; }
cleanup() { rm -rf ${STAGE:+"$STAGE"} "${TEMPORARY[@]}"; }
trap cleanup EXIT

npm_pinned() {
    local dir="$1" spec="$2" name="$3" description="$4" start
    if BIN="$(find_binary "$dir")"; then
        return 0
    fi
    command -v npm >/dev/null || { log "npm not found; install Node.js (20 or newer) and npm"; exit 1; }
    mkdir -p "$(dirname "$dir")"
    exec 9>"$dir.lock"
    if command -v flock >/dev/null; then flock 9; fi
    # Someone else may have finished the install while we waited for the lock.
    if BIN="$(find_binary "$dir")"; then
        return 0
    fi
    STAGE="$dir.stage.$$"
    rm -rf "$STAGE"
    mkdir -p "$STAGE"
    printf '{"name":"%s","private":true,"description":"%s"}\n' "$name" "$description" >"$STAGE/package.json"
    log "installing $spec into $dir (npm cache: $(npm config get cache))"
    start=$(date +%s)
    (cd "$STAGE" && npm install --no-audit --no-fund --no-update-notifier --loglevel=error \
        --save-exact "$spec" >&2)
    if ! find_binary "$STAGE" >/dev/null; then
        log "installed, but no working $spec found under $STAGE/node_modules"
        if declare -F install_hint >/dev/null; then install_hint; fi
        exit 1
    fi
    rm -rf "$dir"
    mv "$STAGE" "$dir"
    STAGE=""
    BIN="$(find_binary "$dir")"
    log "done in $(( $(date +%s) - start )) s; $(du -sh "$dir" | cut -f1) on disk"
}
