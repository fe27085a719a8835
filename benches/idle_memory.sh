#!/usr/bin/env bash
# Idle resident memory of changegate after start-up, on SQLite and (when
# CHANGEGATE_TEST_MYSQL_URL is set) on MariaDB.
# Usage: bash benches/idle_memory.sh        (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
binary="$PWD/target/release/changegate"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

measure() {
    local label=$1 url=$2 port=$3
    (cd "$work" && exec env -u CHANGEGATE_CONFIG CHANGEGATE_LISTEN="127.0.0.1:$port" \
        CHANGEGATE_DATABASE_URL="$url" "$binary" serve >"$work/$label.log" 2>&1) &
    local pid=$!
    for _ in $(seq 1 100); do
        curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    # A few requests, then idle: what an instance between requests holds.
    for _ in $(seq 1 20); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; done
    sleep 3
    printf '%-8s idle RSS: %s\n' "$label" "$(awk '/VmRSS/ {printf "%.1f MB", $2/1024}' "/proc/$pid/status")"
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

measure sqlite "sqlite://$work/changegate.db" 18180
if [ -n "${CHANGEGATE_TEST_MYSQL_URL:-}" ]; then
    db="cg_bench_$$"
    mysql_server=${CHANGEGATE_TEST_MYSQL_URL%/}
    mysql --protocol=tcp -h127.0.0.1 -uroot -e "CREATE DATABASE $db"
    measure mariadb "$mysql_server/$db" 18181
    mysql --protocol=tcp -h127.0.0.1 -uroot -e "DROP DATABASE $db"
fi
