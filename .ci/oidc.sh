#!/usr/bin/env bash
# The identity tests against a real OIDC provider: Debian's glewlwyd, stood
# up from nothing on loopback (.ci/glewlwyd.sh: installed when missing,
# SQLite, an RS256 key, two users, a groups claim), then
# tests/api/identity_oidc.rs, which must run (it fails instead of skipping).
# The provider is stopped and its state removed however the test ends.
set -euo pipefail
cd "$(dirname "$0")/.."

printf '\n== %s\n' "tests against a real OIDC provider (glewlwyd)"
state="$(mktemp -d)"
cleanup() {
    bash .ci/glewlwyd.sh stop "$state" >/dev/null 2>&1 || true
    rm -rf "$state"
}
trap cleanup EXIT
bash .ci/glewlwyd.sh start "$state"
CHANGEGATE_TEST_OIDC_DIR="$state" CHANGEGATE_TEST_REQUIRE_OIDC=1 \
    cargo test --locked --test api -- identity_oidc::
