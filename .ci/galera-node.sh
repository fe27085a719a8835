#!/usr/bin/env bash
# One node of the Galera cluster .ci/galera.sh runs in WORK (its files in
# WORK/nodeN):
#   galera-node.sh WORK start N [mariadbd arguments]
#       starts node N and returns once it is Synced; a node that was killed
#       first recovers its position, so it rejoins by IST (an rsync SST
#       would lock its donor for the copy)
#   galera-node.sh WORK kill N    SIGKILL, and returns once it is gone
#   galera-node.sh WORK stop N    SIGTERM (SIGKILL after 60 s), returns once gone
# A node's process is the pid in WORK/nodeN/node.pid, and only while its
# command line still names the node's my.cnf (pids are reused).
set -euo pipefail

if [ "$#" -lt 3 ]; then
    echo "usage: $0 WORK start|kill|stop N [mariadbd arguments]" >&2
    exit 2
fi
work="$1" action="$2" node="$3"
shift 3
dir="$work/node$node"
cnf="$dir/my.cnf"
[ -f "$cnf" ] || { echo "error: no Galera node $node in $work" >&2; exit 2; }

node_pid() {
    local pid
    pid="$(cat "$dir/node.pid" 2>/dev/null)" || return 1
    # A zombie's command line is empty: it counts as gone.
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "--defaults-file=$cnf" || return 1
    echo "$pid"
}

state() {
    mariadb --no-defaults --socket="$dir/mariadbd.sock" -uroot -N \
        -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | awk '{print $2}'
}

failed() {
    tail -n 40 "$dir/mariadbd.out" "$dir/error.log" >&2 2>/dev/null || true
    echo "error: Galera node $node $1" >&2
    exit 1
}

# After a crash grastate.dat says seqno -1: the position is in InnoDB.
recovered_position() {
    grep -q '^seqno: *-1' "$dir/data/grastate.dat" 2>/dev/null || return 0
    /usr/sbin/mariadbd --defaults-file="$cnf" --wsrep-recover --disable-log-error \
        2>"$dir/recover.out" || failed "could not recover its position"
    sed -n 's/.*WSREP: Recovered position: *//p' "$dir/recover.out" | tail -n 1
}

start() {
    if node_pid >/dev/null; then
        failed "is already running"
    fi
    local position args=("$@")
    position="$(recovered_position)"
    if [ -n "$position" ]; then
        args+=("--wsrep-start-position=$position")
    fi
    /usr/sbin/mariadbd --defaults-file="$cnf" "${args[@]}" \
        </dev/null >>"$dir/mariadbd.out" 2>&1 &
    echo $! >"$dir/node.pid"
    for _ in $(seq 1 240); do
        sleep 0.5
        [ "$(state)" = "Synced" ] && return
        node_pid >/dev/null || failed "stopped while starting"
    done
    failed "was not Synced within 120 s"
}

# Sends $1 to the node and waits up to $2 seconds for it to go.
signal_and_wait() {
    local pid
    pid="$(node_pid)" || return 0
    kill "-$1" "$pid" 2>/dev/null || true
    for _ in $(seq 1 $(($2 * 10))); do
        node_pid >/dev/null || return 0
        sleep 0.1
    done
    return 1
}

case "$action" in
    start) start "$@" ;;
    kill) signal_and_wait KILL 10 || failed "did not die" ;;
    stop) signal_and_wait TERM 60 || signal_and_wait KILL 10 || failed "did not stop" ;;
    *) echo "error: unknown action $action" >&2; exit 2 ;;
esac
