#!/usr/bin/env bash
# A 3-node MariaDB Galera cluster of its own on loopback (client ports
# 3311-3313, own data directories, rsync state transfers, nodes running as
# the mysql user so a joiner's rsync can write its data directory; node 1
# bootstraps the cluster), and the tests that need one, with one changegate
# instance per node. The tests can kill a node and start it again
# ($CHANGEGATE_TEST_GALERA_CTL, see .ci/galera-node.sh). Everything is
# stopped and removed when this script ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

base="${CHANGEGATE_CI_GALERA_PORT_BASE:-3310}"
client_port() { echo $((base + $1)); }
group_port() { echo $((base + 1260 + $1)); }
ist_port() { echo $((base + 1250 + $1)); }
sst_port() { echo $((base + 1130 + $1)); }

ensure_packages() {
    local missing=()
    [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
    [ -f /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
    command -v rsync >/dev/null || missing+=(rsync)
    command -v openssl >/dev/null || missing+=(openssl)
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

ensure_packages
for i in 1 2 3; do
    for port in "$(client_port "$i")" "$(group_port "$i")" "$(ist_port "$i")" "$(sst_port "$i")"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "error: port $port is taken: set CHANGEGATE_CI_GALERA_PORT_BASE" >&2
            exit 1
        fi
    done
done

work="$(mktemp -d "${TMPDIR:-/tmp}/changegate-galera.XXXXXX")"
chmod 755 "$work"
# `$node_ctl start|kill|stop N`: .ci/galera-node.sh for this cluster, also
# for the tests (CHANGEGATE_TEST_GALERA_CTL), which kill nodes and start
# them again. Whatever runs at the end is stopped, however it was started.
node_ctl="$work/ctl"
printf '#!/usr/bin/env bash\nexec bash %q %q "$@"\n' "$PWD/.ci/galera-node.sh" "$work" >"$node_ctl"
chmod 755 "$node_ctl"
stop_cluster() {
    for i in 1 2 3; do
        [ -f "$work/node$i/my.cnf" ] && "$node_ctl" stop "$i" || true
    done
    rm -rf "$work"
}
trap stop_cluster EXIT

node_cnf() {
    local i="$1" dir="$work/node$1"
    local members
    members="$(for n in 1 2 3; do printf '127.0.0.1:%s,' "$(group_port "$n")"; done)"
    cat >"$dir/my.cnf" <<CNF
[mysqld]
user = mysql
datadir = $dir/data
socket = $dir/mariadbd.sock
pid-file = $dir/mariadbd.pid
log-error = $dir/error.log
port = $(client_port "$i")
bind-address = 127.0.0.1
skip-name-resolve
innodb_buffer_pool_size = 64M
binlog_format = ROW
default_storage_engine = InnoDB
innodb_autoinc_lock_mode = 2
wsrep_on = ON
wsrep_provider = /usr/lib/galera/libgalera_smm.so
wsrep_cluster_name = changegate_ci
wsrep_cluster_address = gcomm://${members%,}
wsrep_node_name = node$i
wsrep_node_address = 127.0.0.1:$(group_port "$i")
wsrep_provider_options = "gmcast.listen_addr=tcp://127.0.0.1:$(group_port "$i");ist.recv_addr=127.0.0.1:$(ist_port "$i");cert.log_conflicts=yes"
wsrep_log_conflicts = ON
wsrep_sst_method = rsync
wsrep_sst_receive_address = 127.0.0.1:$(sst_port "$i")
CNF
}

node_failed() {
    cat "$work/node$1/mariadbd.out" "$work/node$1/error.log" >&2 2>/dev/null || true
    echo "error: Galera node $1 $2" >&2
    exit 1
}

log "Galera: three nodes on 127.0.0.1:$(client_port 1)-$(client_port 3)"
for i in 1 2 3; do
    mkdir -p "$work/node$i/data"
    node_cnf "$i"
    chown -R mysql:mysql "$work/node$i"
done
mariadb-install-db --no-defaults --user=mysql --datadir="$work/node1/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$work/node1/install.out" 2>&1 \
    || node_failed 1 "could not be initialised"
"$node_ctl" start 1 --wsrep-new-cluster
password="$(openssl rand -hex 16)"
mariadb --no-defaults --socket="$work/node1/mariadbd.sock" -uroot -e "
    CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY '$password';
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
"$node_ctl" start 2
"$node_ctl" start 3
size="$(MYSQL_PWD="$password" mariadb --no-defaults --protocol=tcp -h127.0.0.1 \
    -P"$(client_port 3)" -uroot -N -e "SHOW STATUS LIKE 'wsrep_cluster_size'" | awk '{print $2}')"
if [ "$size" != 3 ]; then
    echo "error: the Galera cluster has $size nodes, not 3" >&2
    exit 1
fi
echo "cluster of $size nodes, all Synced"

urls=""
for i in 1 2 3; do
    urls+="mysql://root:$password@127.0.0.1:$(client_port "$i"),"
done
export CHANGEGATE_TEST_GALERA_URLS="${urls%,}"
export CHANGEGATE_TEST_MYSQL_URL="mysql://root:$password@127.0.0.1:$(client_port 1)"
export CHANGEGATE_TEST_REQUIRE_MYSQL=1
export CHANGEGATE_TEST_GALERA_CTL="$node_ctl"
# When the tests fail, the conflicts each node logged (a local transaction
# aborted by a replicated one, a write set failing certification) are
# printed before the cluster is removed: they are the server's side of a
# transaction that ended otherwise than the service was told. So is how a
# node that was started again caught up: by IST, or by an rsync SST, which
# holds its donor's writes for the copy.
status=0
"$@" || status=$?
if [ "$status" -ne 0 ]; then
    for i in 1 2 3; do
        echo "== Galera node $i: the last conflicts it logged" >&2
        grep -iE "conflict|BF[ -]abort|brute|certification fail" "$work/node$i/error.log" \
            | grep -v "Passing config" | tail -n 80 >&2 || true
        echo "== Galera node $i: state transfers" >&2
        grep -E "\b(IST|SST)\b|[Dd]onor|Shifting" "$work/node$i/error.log" \
            | grep -v "Passing config" | tail -n 40 >&2 || true
    done
fi
exit "$status"
