#!/usr/bin/env bash
# Restarts a gateway started by ./ops/up.sh without refusing a connection or failing a
# request (docs/operations/upgrades.md, "Restarts and upgrades"): starts the binary now at the same
# path with the same arguments plus --upgrade, waits until it listens on the upgrade socket,
# sends the running process SIGQUIT (it hands its listening sockets over, keeps serving a
# few seconds, stops accepting and drains its requests for --drain-seconds), waits for it to
# exit and for the new one's /readyz. Rebuild first (cargo build) to roll out a new binary.
#
#   ./ops/restart-gateway.sh NODE     NODE: a gateway's pid-file name in .run/pids/ (gateway,
#                                     gateway-1, ...) or its number (1 → gateway-1)
#   ./ops/restart-gateway.sh --all    every gateway, one after the other (a rolling restart)
#
# While the old process drains, its pid is kept in .run/pids/NAME-draining.pid, so that
# ./ops/down.sh stops it too.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"

# The value of --FLAG in the argument list ARGS... (empty when absent).
arg_value() {
    local flag="$1" prev=""
    shift
    for a in "$@"; do
        [ "$prev" = "$flag" ] && { echo "$a"; return 0; }
        case "$a" in "$flag="*) echo "${a#*=}"; return 0 ;; esac
        prev="$a"
    done
}

restart_one() {
    local name="$1" pidfile="$RUN/pids/$1.pid" old new args=() clean=() sock listen admin i
    pid_alive "$pidfile" || die "$name is not running ($pidfile)"
    old="$(cat "$pidfile")"
    mapfile -d '' args <"/proc/$old/cmdline"
    [ "${#args[@]}" -gt 0 ] || die "cannot read the command line of pid $old"
    # The same arguments, without an --upgrade of a previous restart.
    for a in "${args[@]:1}"; do [ "$a" = --upgrade ] || clean+=("$a"); done
    listen="$(arg_value --listen "${clean[@]}")"
    listen="${listen:-127.0.0.1:8080}"
    admin="$(arg_value --admin-listen "${clean[@]}")"
    admin="${admin:-127.0.0.1:9180}"
    sock="$(arg_value --upgrade-sock "${clean[@]}")"
    # The gateway's default: one socket per --listen address (gateway/src/main.rs).
    [ -n "$sock" ] || sock="/tmp/portico-gateway-upgrade-$(printf '%s' "$listen" | tr -c 'A-Za-z0-9' '_').sock"
    rm -f "$sock"
    log "restarting $name (pid $old, listening on $listen)"
    setsid "${args[0]}" "${clean[@]}" --upgrade >>"$RUN/logs/$name.log" 2>&1 </dev/null &
    new=$!
    for ((i = 0; i < 600; i++)); do
        [ -S "$sock" ] && break
        kill -0 "$new" 2>/dev/null || die "the new $name exited before taking over (log: $RUN/logs/$name.log)"
        sleep 0.1
    done
    [ -S "$sock" ] || {
        kill -TERM "$new" 2>/dev/null || true
        die "the new $name never opened $sock (log: $RUN/logs/$name.log)"
    }
    echo "$old" >"$RUN/pids/$name-draining.pid"
    echo "$new" >"$pidfile"
    kill -QUIT "$old"
    # The old process serves ~5 s after the hand-over, then drains (--drain-seconds).
    for ((i = 0; i < 1200; i++)); do
        kill -0 "$old" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$old" 2>/dev/null; then
        warn "the old $name (pid $old) is still draining after 120 s; stopping it"
        stop_pidfile "$RUN/pids/$name-draining.pid"
    fi
    rm -f "$RUN/pids/$name-draining.pid"
    wait_http "http://$admin/readyz" 60 "$pidfile" || die "the new $name is not ready (log: $RUN/logs/$name.log)"
    log "$name restarted (pid $new)"
}

[ $# -eq 1 ] || die "usage: $0 NODE | --all"
case "$1" in
--all)
    found=0
    for pidfile in "$RUN"/pids/gateway*.pid; do
        [ -f "$pidfile" ] || continue
        name="$(basename "$pidfile" .pid)"
        case "$name" in *-draining) continue ;; esac
        restart_one "$name"
        found=1
    done
    [ "$found" = 1 ] || die "no gateway is running (no .run/pids/gateway*.pid)"
    ;;
[0-9]*) restart_one "gateway-$1" ;;
*) restart_one "$1" ;;
esac
