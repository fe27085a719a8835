#!/usr/bin/env bash
# A second MariaDB that accepts TLS connections only (require_secure_transport),
# with a CA and server certificate made for this run, and the MySQL tests that
# matter most for the connection path run against it: readiness, migrations,
# submit, the batch and webhook claim races, and the TLS failure messages.
# The server has its own data directory, port and socket, and is stopped (and
# its files removed) when this script ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

# Runs a command, showing its output only when it fails.
quietly() {
    local output
    if ! output="$("$@" 2>&1)"; then
        printf '%s\n' "$output" >&2
        return 1
    fi
}

port="${CHANGEGATE_CI_TLS_PORT:-3307}"

ensure_packages() {
    local missing=()
    [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
    command -v openssl >/dev/null || missing+=(openssl)
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

ensure_packages

if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "error: port $port is taken: set CHANGEGATE_CI_TLS_PORT to a free port" >&2
    exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/changegate-tls.XXXXXX")"
server_pid=""
stop_server() {
    if [ -n "$server_pid" ]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap stop_server EXIT

log "TLS MariaDB: certificates"
# An EC P-256 CA and a server certificate it signs. The server certificate
# names 127.0.0.1 as an IP SAN (rustls checks IP SANs, so VERIFY_IDENTITY
# works with the address in the URL) and localhost as a DNS SAN.
cat >"$work/ca.ext" <<'EOF'
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
cat >"$work/server.ext" <<'EOF'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
EOF
for name in ca server; do
    quietly openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/$name-key.pem"
done
quietly openssl req -new -key "$work/ca-key.pem" -subj "/CN=changegate CI CA" -out "$work/ca.csr"
quietly openssl x509 -req -in "$work/ca.csr" -signkey "$work/ca-key.pem" -days 2 \
    -extfile "$work/ca.ext" -out "$work/ca.pem"
quietly openssl req -new -key "$work/server-key.pem" -subj "/CN=127.0.0.1" -out "$work/server.csr"
quietly openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
    -CAcreateserial -days 2 -extfile "$work/server.ext" -out "$work/server.pem"
quietly openssl verify -CAfile "$work/ca.pem" "$work/server.pem"

log "TLS MariaDB: data directory and server on 127.0.0.1:$port"
socket="$work/mariadbd.sock"
cat >"$work/my.cnf" <<EOF
[mysqld]
user = root
datadir = $work/data
socket = $socket
pid-file = $work/mariadbd.pid
log-error = $work/error.log
port = $port
bind-address = 127.0.0.1
skip-name-resolve
innodb_buffer_pool_size = 128M
require_secure_transport = ON
ssl_ca = $work/ca.pem
ssl_cert = $work/server.pem
ssl_key = $work/server-key.pem
EOF
quietly mariadb-install-db --no-defaults --user=root --datadir="$work/data" \
    --auth-root-authentication-method=normal --skip-test-db
/usr/sbin/mariadbd --defaults-file="$work/my.cnf" >"$work/mariadbd.out" 2>&1 &
server_pid=$!

server_failed() {
    cat "$work/mariadbd.out" "$work/error.log" >&2 2>/dev/null || true
    echo "error: the TLS MariaDB $1" >&2
    exit 1
}

# Over the socket (which require_secure_transport counts as secure) until the
# server answers, then a TCP account for the tests.
answers_on_socket() {
    mariadb --no-defaults --socket="$socket" -uroot -e 'SELECT 1' >/dev/null 2>&1
}
for _ in $(seq 1 60); do
    answers_on_socket && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        server_pid=""
        server_failed "stopped while starting"
    fi
    sleep 1
done
answers_on_socket || server_failed "did not answer within 60 s"
password="$(openssl rand -hex 16)"
mariadb --no-defaults --socket="$socket" -uroot -e "
    CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY '$password';
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"

# The account over TCP with the server certificate verified: what the tests use.
if ! MYSQL_PWD="$password" mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$port" -uroot \
    --ssl-ca="$work/ca.pem" --ssl-verify-server-cert -e 'SELECT 1' >/dev/null; then
    server_failed "does not answer over TLS"
fi

log "tests against the TLS MariaDB"
server="mysql://root:$password@127.0.0.1:$port"
export CHANGEGATE_TEST_MYSQL_URL="$server/?ssl-mode=VERIFY_IDENTITY&ssl-ca=$work/ca.pem"
export CHANGEGATE_TEST_REQUIRE_MYSQL=1
export CHANGEGATE_TEST_MYSQL_TLS_URL="$server/"
export CHANGEGATE_TEST_MYSQL_TLS_CA="$work/ca.pem"
export CHANGEGATE_TEST_REQUIRE_MYSQL_TLS=1
cargo test --locked --test api -- \
    readiness:: \
    storage::migrations_are_idempotent_and_leave_the_database_ready \
    requests::submit:: \
    batches::twenty_racing_claimers_keep_one_active_batch_and_claim_every_request_once \
    webhooks_race:: \
    tls::
