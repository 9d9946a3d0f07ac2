#!/usr/bin/env bash
# Stops what ./ops/up.sh started (the processes whose pids are in .run/pids/), newest first.
# Keeps .run/ (logs, config copy) for a look afterwards; `rm -rf .run` to forget it.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"

stopped=0
for name in registry gateway demo-backend zookeeper; do
    pidfile="$RUN/pids/$name.pid"
    [ -f "$pidfile" ] || continue
    if pid_alive "$pidfile"; then
        log "stopping $name (pid $(cat "$pidfile"))"
        stopped=$((stopped + 1))
    fi
    stop_pidfile "$pidfile"
done
# Anything else a later script registered.
for pidfile in "$RUN"/pids/*.pid; do
    [ -f "$pidfile" ] || continue
    log "stopping $(basename "$pidfile" .pid) (pid $(cat "$pidfile"))"
    stop_pidfile "$pidfile"
    stopped=$((stopped + 1))
done
echo "Portico stopped ($stopped processes)."
