#!/usr/bin/env bash
# zkCli as the SREs' operator identity (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs"):
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
#
# One command exits 1 when zkCli reports an error (`Node does not exist`, `Insufficient
# permission`, `Command not found`, ...: zkCli itself exits 0), and a `set` or `create` of a
# JSON document of the tree under PORTICO_ZK_ROOT (default /portico: apis, clusters, apps,
# switches, alerts, topics, ipacl, live or sandbox) is refused, exit 2, unless its data is
# valid JSON: gateways would reject it and keep serving the previous version.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"

case "${1:-}" in
-h | --help)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
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
# The path and data of a `set` / `create` (options such as -s, -v N, -e skipped).
document_write() {
    local cmd="$1"
    shift
    case "$cmd" in set | create) ;; *) return 1 ;; esac
    local args=()
    while [ "$#" -gt 0 ]; do
        case "$1" in
        -v | -t) shift 2 ;;
        -*) shift ;;
        *)
            args+=("$1")
            shift
            ;;
        esac
    done
    [ "${#args[@]}" -ge 2 ] || return 1
    write_path="${args[0]}"
    write_data="${args[1]}"
}
if [ "$#" -gt 0 ]; then
    root="${PORTICO_ZK_ROOT:-/portico}"
    if document_write "$@"; then
        case "$write_path" in
        "$root"/apis/?* | "$root"/clusters/?* | "$root"/apps/?* | "$root"/switches/?* | \
            "$root"/alerts/?* | "$root"/topics/?* | "$root"/ipacl | \
            "$root"/sandbox/apis/?* | "$root"/sandbox/clusters/?* | "$root"/sandbox/apps/?* | \
            "$root"/sandbox/switches/?* | "$root"/sandbox/alerts/?* | "$root"/sandbox/topics/?* | \
            "$root"/sandbox/ipacl)
            if ! why="$(python3 -c 'import json, sys; json.loads(sys.argv[1])' "$write_data" 2>&1)"; then
                echo "zkcli.sh: refused: the data for $write_path is not valid JSON (${why##*$'\n'}); gateways would reject it and keep serving the previous version" >&2
                exit 2
            fi
            ;;
        esac
    fi
    # One command; each argument quoted for zkCli's own parser.
    line=""
    for a in "$@"; do
        line+=" '${a//\'/}'"
    done
    out="$(printf 'addauth digest %s\n%s\nquit\n' "$cred" "$line" | run 2>&1 |
        grep -v -e '^SLF4J' -e '^WATCHER::' -e '^WatchedEvent' -e '^$' -e '^Welcome to ZooKeeper' -e '^JLine support' -e '^Connecting to ' || true)"
    [ -z "$out" ] || printf '%s\n' "$out"
    # zkCli exits 0 whatever happened: its error lines decide.
    if printf '%s\n' "$out" | grep -q -E \
        -e '^(Node does not exist|Node already exists|Node not empty|Insufficient permission|Authentication is not valid|Acl is not valid|version No is not valid|Command not found|KeeperErrorCode|ZooKeeper -server host:port)' \
        -e 'Exception'; then
        exit 1
    fi
else
    log "zkCli on $zk as $(cut -d: -f1 "$auth_file") (no line editing; quit to leave)"
    { printf 'addauth digest %s\n' "$cred"; cat; } | run
fi
