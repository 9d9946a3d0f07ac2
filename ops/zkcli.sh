#!/usr/bin/env bash
# zkCli as the SREs' operator identity (docs/OPERATIONS.md, "ZooKeeper credentials and ACLs"):
# runs ZooKeeper's zkCli.sh with `addauth digest <operator credentials>` first. The password is
# fed on zkCli's stdin, never on a command line.
#
#   ./ops/zkcli.sh [COMMAND ...]          one command, e.g.
#   ./ops/zkcli.sh set /portico/switches/order.create '{"degraded":true,"reason":"db-failover"}'
#   ./ops/zkcli.sh                        an interactive session (commands from the terminal)
#
# PORTICO_ZK (default: .run/env's, else 127.0.0.1:2181) and PORTICO_ZK_AUTH_FILE (default:
# PORTICO_ZK_OPERATOR_AUTH_FILE of .run/env, else .run/zk/operator) choose the server and the
# credentials file (`portico-operator:PASSWORD`, mode 0600).
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"

case "${1:-}" in
-h | --help)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
if [ -f "$RUN/env" ]; then
    # shellcheck disable=SC1091
    env_zk="$(. "$RUN/env" && echo "${PORTICO_ZK:-}")"
    env_auth="$(. "$RUN/env" && echo "${PORTICO_ZK_OPERATOR_AUTH_FILE:-}")"
fi
zk="${PORTICO_ZK:-${env_zk:-127.0.0.1:2181}}"
auth_file="${PORTICO_ZK_AUTH_FILE:-${env_auth:-$RUN/zk/operator}}"
[ -r "$auth_file" ] || die "no operator credentials at $auth_file (set PORTICO_ZK_AUTH_FILE)"
case "$(stat -c %a "$auth_file")" in
*00) ;;
*) die "$auth_file is readable by others: chmod 600 $auth_file" ;;
esac
[ -x "$ZK_BIN/zkCli.sh" ] || die "zkCli.sh not found at $ZK_BIN (apt-get install zookeeper)"
cred="$(head -n 1 "$auth_file")"
run() { JMXDISABLE=true CLIENT_JVMFLAGS="-Xmx128m" "$ZK_BIN/zkCli.sh" -server "$zk"; }
if [ "$#" -gt 0 ]; then
    # One command; each argument quoted for zkCli's own parser.
    line=""
    for a in "$@"; do
        line+=" '${a//\'/}'"
    done
    printf 'addauth digest %s\n%s\nquit\n' "$cred" "$line" | run 2>&1 |
        grep -v -e '^SLF4J' -e '^WATCHER::' -e '^WatchedEvent' -e '^$' -e '^Welcome to ZooKeeper' -e '^JLine support' || true
else
    log "zkCli on $zk as $(cut -d: -f1 "$auth_file") (no line editing; quit to leave)"
    { printf 'addauth digest %s\n' "$cred"; cat; } | run
fi
