#!/usr/bin/env bash
# The API contract: the OpenAPI document changegate serves is valid
# (openapi-spec-validator), the server keeps it (schemathesis, every check,
# as a requester and as the operator), and a client generated from it
# (openapi-python-client) applies for a target and reads the operation back.
# Runs the debug binary on a temporary SQLite database with
# .ci/api-contract/changegate.toml. Fails on any finding.
#
#   bash .ci/api-contract.sh            # examples per operation: 50
#   CONTRACT_MAX_EXAMPLES=100 CONTRACT_SEED=7 bash .ci/api-contract.sh   # search wider
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

here=.ci/api-contract
max_examples="${CONTRACT_MAX_EXAMPLES:-50}"
venv="$(realpath -m "${CONTRACT_VENV:-target/api-contract-venv}")"

log "API contract tools (pinned)"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check \
    openapi-spec-validator==0.9.0 schemathesis==4.32.5 openapi-python-client==0.29.1

cargo build --locked --bin changegate

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
sed -e "s|@PORT@|$port|" -e "s|@DB@|$work/changegate.db|" "$here/changegate.toml" >"$work/changegate.toml"

log "starting changegate on $base"
target/debug/changegate serve --config "$work/changegate.toml" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
    curl -sf "$base/readyz" >/dev/null && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        cat "$work/server.log" >&2
        echo "error: changegate exited before it was ready" >&2
        exit 1
    fi
    sleep 0.2
done
curl -sf "$base/readyz" >/dev/null || { cat "$work/server.log" >&2; echo "error: changegate never became ready" >&2; exit 1; }
curl -sf "$base/api/openapi.json" >"$work/openapi.json"

log "openapi-spec-validator"
"$venv/bin/openapi-spec-validator" --validation-errors all "$work/openapi.json"

# Run in the temporary directory: schemathesis and Hypothesis keep their
# caches in the working directory.
config="$PWD/$here/schemathesis.toml"
for user in alice admin; do
    log "schemathesis as $user (--checks all, --max-examples $max_examples)"
    (cd "$work" && CHANGEGATE_CONTRACT_USER="$user" "$venv/bin/schemathesis" \
        --config-file "$config" \
        run "$base/api/openapi.json" \
        --checks all --max-examples "$max_examples" \
        --seed "${CONTRACT_SEED:-20240601}" --report-dir "$work/reports-$user")
done

log "openapi-python-client: generate, apply, read back"
# A warning means part of the document could not be turned into a client.
"$venv/bin/openapi-python-client" generate --path "$work/openapi.json" \
    --output-path "$work/changegate_client" --meta none \
    --config "$here/openapi-python-client.yaml" >"$work/generate.log" 2>&1
if grep -qi "warning" "$work/generate.log"; then
    cat "$work/generate.log" >&2
    echo "error: the client generated from the document is incomplete" >&2
    exit 1
fi
PYTHONPATH="$work" "$venv/bin/python" "$here/client_check.py" "$base"
echo "contract: 4 passed, 0 failed"
