#!/usr/bin/env bash
# The operations files: the alerting rules are valid (`promtool check
# rules`) and pass their unit tests (`promtool test rules`), and a running
# changegate exports what they and the Grafana dashboard read: its /metrics,
# scraped after a few requests went through it, passes `promtool check
# metrics` without a finding, and every metric named in
# deploy/prometheus/alerts.yml and deploy/grafana/changegate.json is in it
# (.ci/ops-checks/metric_names.py, which also has each dashboard query parsed
# by promtool). Runs the debug binary on a temporary SQLite database with
# .ci/ops-checks/changegate.toml. Fails on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

here=.ci/ops-checks
rules=deploy/prometheus/alerts.yml
dashboard=deploy/grafana/changegate.json
venv="$(realpath -m "${OPS_CHECKS_VENV:-target/ops-checks-venv}")"

if ! command -v promtool >/dev/null; then
    log "installing promtool (Debian's prometheus)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # Only promtool is needed: not the exporters it recommends.
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool --version | head -1

log "promtool check rules"
promtool check rules "$rules"

log "promtool test rules"
promtool test rules deploy/prometheus/alerts_test.yml

log "PyYAML (pinned) for the metric name check"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check PyYAML==6.0.2

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

# Free ports: changegate's, and two that nothing listens on (GitLab and the
# webhook receiver refuse every connection).
read -r port gitlab_port receiver_port < <("$venv/bin/python" -c '
import socket
sockets = [socket.socket() for _ in range(3)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))')
base="http://127.0.0.1:$port"
sed -e "s|@PORT@|$port|" -e "s|@DB@|$work/changegate.db|" \
    -e "s|@GITLAB@|http://127.0.0.1:$gitlab_port|" "$here/changegate.toml" >"$work/changegate.toml"

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

as() {
    local user="$1" method="$2" path="$3" body="${4:-}"
    curl -sf -X "$method" -H "X-Auth-Request-User: $user" -H 'Content-Type: application/json' \
        ${body:+--data "$body"} "$base$path"
}

log "driving requests through it"
# A webhook endpoint first, so that the status changes below are delivered
# to it (and fail: its breaker opens).
as admin POST /admin/v1/webhook-endpoints \
    "{\"url\": \"http://127.0.0.1:$receiver_port/hook\", \"description\": \"ops checks\"}" >/dev/null
apply() {
    as "$1" POST /api/v1/applications \
        "{\"targetKey\": \"demo.feature-flags\", \"reason\": \"ops checks\"}" | jq -r .operationId
}
approved="$(apply alice)"
waiting="$(apply bob)"
for _ in $(seq 1 50); do
    [ "$(as alice GET "/api/v1/operations/$approved" | jq -r .status)" = APPROVAL_SENT ] && break
    sleep 0.2
done
# Approved, it waits for a batch round, whose MR GitLab cannot be reached
# for; the other request stays unfinished, awaiting approval.
as admin POST "/admin/v1/approvals/$approved/approve" '{"reason": "ops checks"}' >/dev/null
as alice GET /api/v1/targets >/dev/null
echo "applied $approved (approved) and $waiting (awaiting approval)"

# The progress gauges are read from the database once a minute: wait for a
# round after the requests, and for the batch's first GitLab call.
log "scraping /metrics"
names=(changegate_operations_in_progress changegate_batch_size_count
       changegate_step_duration_seconds_count changegate_webhook_endpoints
       'changegate_outbound_requests_total{system="gitlab"'
       'changegate_webhook_endpoints{breaker="open"} 1' changegate_drift_files)
deadline=$((SECONDS + 90))
while :; do
    curl -sf "$base/metrics" >"$work/metrics.txt"
    absent=()
    for name in "${names[@]}"; do
        grep -qF "$name" "$work/metrics.txt" || absent+=("$name")
    done
    [ "${#absent[@]}" -eq 0 ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
        cat "$work/server.log" >&2
        echo "error: not in /metrics after 90 s: ${absent[*]}" >&2
        exit 1
    fi
    sleep 2
done
echo "$(grep -c '^changegate_' "$work/metrics.txt") series"

log "promtool check metrics"
if ! promtool check metrics <"$work/metrics.txt" >"$work/lint.txt" 2>&1 || [ -s "$work/lint.txt" ]; then
    cat "$work/lint.txt" >&2
    echo "error: promtool check metrics found problems in /metrics" >&2
    exit 1
fi
echo "no findings"

log "metric names of the rules and the dashboard"
"$venv/bin/python" "$here/metric_names.py" "$rules" "$dashboard" "$work/metrics.txt" "$work/dashboard-queries.yml"
promtool check rules "$work/dashboard-queries.yml" >/dev/null || {
    promtool check rules "$work/dashboard-queries.yml" >&2
    echo "error: a dashboard query does not parse" >&2
    exit 1
}
echo "ops-checks: 4 passed, 0 failed"
