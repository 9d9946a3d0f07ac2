#!/usr/bin/env bash
# Stops what ./ops/up.sh started (the processes whose pids are in .run/pids/): registries
# and gateways first, then the demo backend, Redis and ZooKeeper.
# Keeps .run/ (logs, config copy) for a look afterwards; `rm -rf .run` to forget it.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"

stopped=0
# Registries and gateways (with any still draining after ./ops/restart-gateway.sh) first,
# then what they use.
for pidfile in "$RUN"/pids/registry*.pid "$RUN"/pids/gateway*.pid "$RUN/pids/demo-backend.pid" \
    "$RUN/pids/redis.pid" "$RUN"/pids/zookeeper*.pid; do
    [ -f "$pidfile" ] || continue
    name="$(basename "$pidfile" .pid)"
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
