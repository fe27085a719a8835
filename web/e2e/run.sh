#!/usr/bin/env bash
# Browser tests: runs the README's run command (changegate and its
# simulators) on a fresh temporary database, then runs tests/*.test.mjs in
# headless Chromium.
#
#   web/e2e/run.sh
#
# Needs /usr/bin/chromium (Debian `chromium`; CHROMIUM=... for another) and
# the npm packages (`npm ci` in this directory); .ci/run installs both.
# Screenshots and the demo's log go to web/e2e/screenshots/
# (CHANGEGATE_E2E_OUTPUT=... for another directory). With
# CHANGEGATE_E2E_TUTORIAL=1, a passing run also copies the screenshots the
# manual's tutorial shows (docs/src/tutorial/images/) over them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

chromium="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
    echo "error: no Chromium at $chromium: install the Debian package chromium, or set CHROMIUM" >&2
    exit 1
fi
if [ ! -d "$here/node_modules/playwright-core" ]; then
    echo "error: the test packages are missing: run npm ci in web/e2e" >&2
    exit 1
fi

export CHANGEGATE_E2E_OUTPUT="${CHANGEGATE_E2E_OUTPUT:-$here/screenshots}"
mkdir -p "$CHANGEGATE_E2E_OUTPUT"

# The README's run command, exactly as a newcomer types it: the first
# command in the code block after "**Run it**".
run_command="$(awk '/^\*\*Run it\*\*/ { found = 1 } found && /^```sh/ { getline; print; exit }' "$root/README.md")"
if [ -z "$run_command" ]; then
    echo "error: no run command found under **Run it** in README.md" >&2
    exit 1
fi
echo "run command: $run_command"

scratch="$(mktemp -d)"
demo_pid=""
cleanup() {
    if [ -n "$demo_pid" ]; then
        kill "$demo_pid" 2>/dev/null || true
        wait "$demo_pid" 2>/dev/null || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT

base_url="${CHANGEGATE_E2E_BASE_URL:-http://127.0.0.1:8080}"
if curl -fsS -o /dev/null "$base_url/healthz" 2>/dev/null; then
    echo "error: something already answers at $base_url; stop it first (the demo's ports are fixed)" >&2
    exit 1
fi

# On a database of this run only. `cargo run` execs the program, so the pid
# is the service's; the wait covers a first build.
(cd "$root" && CHANGEGATE_DATABASE_URL="sqlite://$scratch/demo.db" exec bash -c "exec $run_command") \
    >"$CHANGEGATE_E2E_OUTPUT/demo.log" 2>&1 &
demo_pid=$!

for _ in $(seq 1 1200); do
    curl -fsS -o /dev/null "$base_url/readyz" 2>/dev/null && break
    if ! kill -0 "$demo_pid" 2>/dev/null; then
        echo "error: the demo stopped; its log:" >&2
        cat "$CHANGEGATE_E2E_OUTPUT/demo.log" >&2
        exit 1
    fi
    sleep 0.5
done
curl -fsS -o /dev/null "$base_url/readyz"

export CHANGEGATE_E2E_BASE_URL="$base_url" CHROMIUM="$chromium"
cd "$here"
status=0
node --test --test-concurrency=1 tests/ || status=$?
if ! kill -0 "$demo_pid" 2>/dev/null; then
    echo "error: the demo stopped during the tests; its log is $CHANGEGATE_E2E_OUTPUT/demo.log" >&2
    status=1
fi
if [ "$status" -eq 0 ] && [ "${CHANGEGATE_E2E_TUTORIAL:-}" = 1 ]; then
    for image in "$root"/docs/src/tutorial/images/*.png; do
        cp "$CHANGEGATE_E2E_OUTPUT/$(basename "$image")" "$image"
    done
    echo "the tutorial's screenshots are this run's"
fi
exit "$status"
