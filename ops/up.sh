#!/usr/bin/env bash
# Brings up a local Portico: builds the binaries and the console, then starts a private
# ZooKeeper, the demo backend, the registry (with the console), loads a copy of
# ops/examples/standalone into ZooKeeper through the registry (live and sandbox trees), and
# starts a gateway in ZooKeeper mode with a sandbox listener, a TLS listener (a local
# certificate, generated once into .run/tls/) and a disk snapshot. ZooKeeper is locked down:
# the registry, gateway and operator credentials are made once in .run/zk/ (0600), `portico
# zk lockdown` creates the tree with their ACLs, and the registry and the gateway get their
# credentials files (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs"). State, logs and
# pids go to .run/; ./ops/down.sh stops everything.
#
#   ./ops/up.sh [--debug] [--no-build] [--standalone | --cluster] [--no-tls]
#
#   --debug      use the debug build (faster to compile; the default is --release, for
#                realistic latency and throughput)
#   --no-build   do not run cargo build (use what target/ has)
#   --standalone the gateway serves .run/config (a directory) instead of ZooKeeper, and the
#                registry is not started
#   --no-tls     no TLS listener (plain HTTP only)
#   --cluster    a fleet on this machine (docs/operations/cluster.md, "Running a cluster"): a
#                three-server ZooKeeper ensemble, Redis, two registries on the same tree and
#                three gateways (gateway-1 with the sandbox and TLS listeners), each with
#                its own ports; .run/env names them (PORTICO_GATEWAY_1..3, PORTICO_ADMIN_1..3,
#                PORTICO_REGISTRY_1..2, PORTICO_ZK with three hosts, PORTICO_REDIS)
#
# Preferred ports (any free port instead when taken; the summary prints the real ones):
# gateway 8080, gateway TLS 8443, sandbox 8081, admin 9180, registry 9000, demo backend HTTP
# 18081 / gRPC 50051. Override with PORTICO_LISTEN_PORT, PORTICO_TLS_PORT,
# PORTICO_SANDBOX_PORT, PORTICO_ADMIN_PORT, PORTICO_REGISTRY_PORT; PORTICO_ANY_PORT=1 takes free
# ports for everything (the quick-start test does). PORTICO_RUN_DIR replaces .run/.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"

profile="${PORTICO_PROFILE:-release}"
build=1
cluster=0
mode=zk
tls=1
for arg in "$@"; do
    case "$arg" in
    --debug) profile=debug ;;
    --release) profile=release ;;
    --no-build) build=0 ;;
    --standalone) mode=standalone ;;
    --cluster) cluster=1 ;;
    --no-tls) tls=0 ;;
    -h | --help)
        sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) die "unknown argument: $arg (see --help)" ;;
    esac
done
bindir="$ROOT/target/$profile"
[ "$cluster" = 1 ] && [ "$mode" = standalone ] && die "--cluster and --standalone exclude each other"

ensure_packages cmake zookeeper curl python3

if [ "$build" = 1 ]; then
    profile_flag=()
    [ "$profile" = release ] && profile_flag=(--release)
    # One build of the binaries the stack runs (one feature resolution, so nothing compiles
    # twice): the gateway, the registry and its CLI, the demo backend. Not the benchmark
    # tools of benches/ (three more Pingora proxies, jemalloc: a first run took 22 minutes
    # with them; ops/bench.sh builds them). The gateway and the demo backend are required;
    # the registry and CLI are used only when they build, so on failure build just those two.
    log "cargo build ${profile_flag[*]} -p portico-gateway -p portico-registry -p portico-demo --bins"
    if ! (cd "$ROOT" && cargo build "${profile_flag[@]}" -p portico-gateway -p portico-registry -p portico-demo --bins); then
        warn "some binaries of the workspace did not build; building the gateway and the demo backend alone"
        (cd "$ROOT" && cargo build "${profile_flag[@]}" -p portico-gateway -p portico-demo --bins)
    fi
fi
[ -x "$bindir/portico-demo-backend" ] || die "$bindir/portico-demo-backend is missing (build failed?)"

# --- the console (admin-ui/, served by the registry at /) and the developer portal -------
# (admin-ui/portal/, a second entry of the same build, served at /portal/).
# npm ci only when node_modules is not the lock file's; the build only when a source changed.
if [ "$build" = 1 ]; then
    command -v npm >/dev/null 2>&1 || ensure_packages nodejs npm
    "$ROOT/admin-ui/build.sh" || warn "the console did not build; the registry's / says how to build it"
fi

# A second `up` replaces the first.
if compgen -G "$RUN/pids/*.pid" >/dev/null; then
    log "stopping the previous run"
    "$ROOT/ops/down.sh" >/dev/null
fi
mkdir -p "$RUN/logs" "$RUN/pids"
# If anything below fails, stop what was started (logs stay in .run/logs/).
up_ok=0
trap '[ "$up_ok" = 1 ] || { warn "startup failed; stopping what was started"; "$ROOT/ops/down.sh" >/dev/null 2>&1 || true; }' EXIT

# --- ZooKeeper -----------------------------------------------------------------------
rm -rf "$RUN/zookeeper"
redis_url=""
redis_auth="$RUN/redis"
# How each gateway reaches Redis: the ACL user, the password and the notification key from
# 0600 files, never on a command line (docs/operations/cluster.md, "Redis credentials and TLS").
redis_args=()
if [ "$cluster" = 1 ]; then
    zk_ports=("$(pick_port 2181)" "$(pick_port 2182)" "$(pick_port 2183)")
    zk_hosts="127.0.0.1:${zk_ports[0]},127.0.0.1:${zk_ports[1]},127.0.0.1:${zk_ports[2]}"
    log "ZooKeeper ensemble on $zk_hosts"
    start_zk_ensemble "$RUN/zookeeper" "${zk_ports[@]}"
    redis_port="$(pick_port "${PORTICO_REDIS_PORT:-6379}")"
    redis_credentials "$redis_auth"
    log "Redis on 127.0.0.1:$redis_port (ACL user portico; password and notification key in $redis_auth/)"
    start_redis "$redis_port" "$redis_auth"
    redis_url="redis://127.0.0.1:$redis_port"
else
    zk_port="$(pick_port "${PORTICO_ZK_PORT:-2181}")"
    log "ZooKeeper on 127.0.0.1:$zk_port"
    start_zookeeper "$RUN/zookeeper" "$zk_port"
    zk_hosts="127.0.0.1:$zk_port"
fi

# --- demo backend --------------------------------------------------------------------
demo_http_port="$(pick_port 18081)"
demo_grpc_port="$(pick_port 50051)"
log "demo backend"
start_bg demo-backend "$RUN/logs/demo-backend.log" \
    "$bindir/portico-demo-backend" --http "127.0.0.1:$demo_http_port" --grpc "127.0.0.1:$demo_grpc_port"
ready="$(wait_ready_line "$RUN/logs/demo-backend.log" portico-demo-backend 30 "$RUN/pids/demo-backend.pid")" ||
    {
        cat "$RUN/logs/demo-backend.log" >&2
        die "the demo backend did not start"
    }
demo_http="$(ready_field "$ready" http)"
demo_grpc="$(ready_field "$ready" grpc)"

# --- configuration: a private copy of the example tree, pointed at the backend -----------
rm -rf "$RUN/config"
cp -R "$ROOT/ops/examples/standalone" "$RUN/config"
find "$RUN/config" -name '*.json' -exec sed -i \
    -e "s/127\.0\.0\.1:18081/$demo_http/g" -e "s/127\.0\.0\.1:50051/$demo_grpc/g" {} +

# --- ZooKeeper locked down: credentials (kept across runs) and the locked tree -----------
zk_auth="$RUN/zk"
if [ "$mode" = zk ]; then
    [ -x "$bindir/portico" ] || die "$bindir/portico is missing (build failed?)"
    zk_credentials "$zk_auth"
    log "locking the ZooKeeper tree /portico (credentials in $zk_auth/)"
    "$bindir/portico" zk lockdown --zk "$zk_hosts" --root /portico \
        --registry-auth-file "$zk_auth/registry" --gateway-auth-file "$zk_auth/gateway" \
        --operator-auth-file "$zk_auth/operator" >"$RUN/logs/lockdown.log" ||
        die "locking the ZooKeeper tree failed (log: $RUN/logs/lockdown.log)"
fi

# The notification publisher token (docs/operations/notifications.md, "Notifications"), made once: the
# gateways take publishes with it, and the registries send the console's test events with it.
publish_token_file="$RUN/publish-token"
[ -s "$publish_token_file" ] || (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(16))' >"$publish_token_file")

# --- registry ---------------------------------------------------------------------------
registry_url=""
reg_port="$(pick_port "${PORTICO_REGISTRY_PORT:-9000}")"
if [ "$mode" = zk ]; then
    [ -x "$bindir/portico-registry" ] || die "$bindir/portico-registry is missing (build failed?)"
    log "registry on 127.0.0.1:$reg_port"
    # The admin token (console sign-in, CLI), kept across runs.
    token_file="$RUN/admin-token"
    [ -s "$token_file" ] || (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(16))' >"$token_file")
    # Its history store and reports live under .run/ (docs/operations/history-and-reports.md, "The history store").
    start_bg registry "$RUN/logs/registry.log" \
        "$bindir/portico-registry" --zk "$zk_hosts" --listen "127.0.0.1:$reg_port" \
        --admin-token-file "$token_file" --zk-auth-file "$zk_auth/registry" \
        --data-dir "$RUN/registry" --history-db "$RUN/registry/history.sqlite" \
        --publish-token-file "$publish_token_file"
    if ! wait_http "http://127.0.0.1:$reg_port/api/v1/health" 30 "$RUN/pids/registry.pid"; then
        tail -n 20 "$RUN/logs/registry.log" >&2 || true
        die "the registry did not start (log: $RUN/logs/registry.log)"
    fi
    registry_url="http://127.0.0.1:$reg_port"
    registry2_url=""
    if [ "$cluster" = 1 ]; then
        # A second registry on the same tree: stateless, either serves the console and CLI.
        reg2_port="$(pick_port 9001)"
        log "registry 2 on 127.0.0.1:$reg2_port"
        start_bg registry-2 "$RUN/logs/registry-2.log" \
            "$bindir/portico-registry" --zk "$zk_hosts" --listen "127.0.0.1:$reg2_port" \
            --admin-token-file "$token_file" --zk-auth-file "$zk_auth/registry" \
            --data-dir "$RUN/registry-2" --history-db "$RUN/registry-2/history.sqlite" \
            --publish-token-file "$publish_token_file"
        wait_http "http://127.0.0.1:$reg2_port/api/v1/health" 30 "$RUN/pids/registry-2.pid" ||
            die "registry 2 did not start (log: $RUN/logs/registry-2.log)"
        registry2_url="http://127.0.0.1:$reg2_port"
    fi
    # Seed ZooKeeper with the example tree, live and sandbox (sandbox apps and clusters let
    # the console's "try in sandbox" work at once), through the registry: validated and audited.
    # Sandbox apps have secrets of their own (the live one with "-sandbox" appended): the
    # sandbox refuses an app signing with its live secret, so a call signed for one plane is
    # never good on the other (docs/PROTOCOL.md, "The sandbox").
    rm -rf "$RUN/config-sandbox"
    cp -R "$RUN/config" "$RUN/config-sandbox"
    python3 - "$RUN/config-sandbox/apps" <<'PY'
import json, pathlib, sys
for f in pathlib.Path(sys.argv[1]).glob("*.json"):
    app = json.loads(f.read_text())
    app["secret"] = app["secret"] + "-sandbox"
    f.write_text(json.dumps(app, indent=2) + "\n")
PY
    log "loading the example tree into ZooKeeper"
    for tree_env in "$RUN/config:" "$RUN/config-sandbox:--sandbox"; do
        PORTICO_ADMIN_TOKEN="$(cat "$token_file")" PORTICO_OPERATOR=ops-up \
            "$bindir/portico" --registry "$registry_url" import tree "${tree_env%%:*}" ${tree_env#*:} ||
            die "loading the example tree failed"
    done
    # The portal's try-it relays merchants' calls to the sandbox listener and names the
    # merchant in X-Forwarded-For: the sandbox plane takes that word from the registry's
    # address (here 127.0.0.1) as from a trusted proxy, so its IP deny list and per-IP limits
    # see the merchant, not the registry (docs/SECURITY.md, "The registry and the internet").
    sandbox_acl="$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); tp=a.setdefault("trusted_proxies", []); "127.0.0.1/32" in tp or tp.append("127.0.0.1/32"); print(json.dumps(a))' "$RUN/config/ipacl.json")"
    curl -fsS -o /dev/null -X PUT "$registry_url/api/v1/sandbox/ipacl" \
        -H "Authorization: Bearer $(cat "$token_file")" -H "X-Portico-Operator: ops-up" \
        -H "Content-Type: application/json" --data "$sandbox_acl" ||
        die "setting the sandbox's trusted proxies (the registry) failed"
fi

# --- gateway ---------------------------------------------------------------------------
gw_port="$(pick_port "${PORTICO_LISTEN_PORT:-8080}")"
admin_port="$(pick_port "${PORTICO_ADMIN_PORT:-9180}")"
sandbox_port="$(pick_port "${PORTICO_SANDBOX_PORT:-8081}")"
[ -x "$bindir/portico-gateway" ] || die "$bindir/portico-gateway is missing (build failed?)"
internal_port="$(pick_port "${PORTICO_INTERNAL_PORT:-9181}")"
gw_args=(--listen "127.0.0.1:$gw_port" --admin-listen "127.0.0.1:$admin_port"
    --sandbox-listen "127.0.0.1:$sandbox_port" --access-log "$RUN/logs/access.log"
    --internal-listen "127.0.0.1:$internal_port" --publish-token-file "$publish_token_file")
if [ "$mode" = zk ]; then
    gw_args+=(--zk "$zk_hosts" --zk-auth-file "$zk_auth/gateway" --snapshot-dir "$RUN/snapshot" --node-id local-1)
else
    gw_args+=(--config-dir "$RUN/config")
fi
# TLS for merchant traffic (docs/operations/gateway.md, "TLS"): a local certificate, made once.
tls_url=""
if [ "$tls" = 1 ]; then
    ensure_local_tls "$RUN/tls"
    tls_port="$(pick_port "${PORTICO_TLS_PORT:-8443}")"
    # The fleet's session ticket keys: every gateway below reads the same file, so a
    # returning client resumes its TLS session on any of them.
    "$ROOT/ops/tls-ticket-keys.sh" ensure "$RUN/tls/ticket-keys" >/dev/null
    tls_args=(--tls-cert "$RUN/tls/cert.pem" --tls-key "$RUN/tls/key.pem" --tls-ticket-keys "$RUN/tls/ticket-keys")
    gw_args+=(--tls-listen "127.0.0.1:$tls_port" "${tls_args[@]}")
    tls_url="https://127.0.0.1:$tls_port"
fi
gw_name=gateway
if [ "$cluster" = 1 ]; then
    gw_name=gateway-1
    redis_args=(--redis "$redis_url" --redis-user portico --redis-password-file "$redis_auth/redis-password"
        --notify-key-file "$redis_auth/notify-key")
    gw_args+=("${redis_args[@]}")
fi
log "$gw_name on 127.0.0.1:$gw_port (${tls_url:+TLS $tls_url, }sandbox 127.0.0.1:$sandbox_port, admin 127.0.0.1:$admin_port)"
start_bg "$gw_name" "$RUN/logs/$gw_name.log" "$bindir/portico-gateway" "${gw_args[@]}"
if ! wait_http "http://127.0.0.1:$admin_port/readyz" 60 "$RUN/pids/$gw_name.pid"; then
    tail -n 40 "$RUN/logs/$gw_name.log" >&2 || true
    die "the gateway did not become ready (log: $RUN/logs/$gw_name.log)"
fi
# --cluster: two more gateways on the same tree, each with its own ports and node id.
cluster_gateways=("http://127.0.0.1:$gw_port")
cluster_admins=("http://127.0.0.1:$admin_port")
if [ "$cluster" = 1 ]; then
    for n in 2 3; do
        p="$(free_port)"
        a="$(free_port)"
        tls_extra=()
        [ "$tls" = 1 ] && tls_extra=(--tls-listen "127.0.0.1:$(free_port)" "${tls_args[@]}")
        log "gateway-$n on 127.0.0.1:$p (admin 127.0.0.1:$a)"
        start_bg "gateway-$n" "$RUN/logs/gateway-$n.log" "$bindir/portico-gateway" \
            --listen "127.0.0.1:$p" --admin-listen "127.0.0.1:$a" \
            --access-log "$RUN/logs/access-$n.log" --zk "$zk_hosts" \
            --zk-auth-file "$zk_auth/gateway" --snapshot-dir "$RUN/snapshot-$n" \
            --node-id "local-$n" "${redis_args[@]}" \
            --internal-listen "127.0.0.1:$(free_port)" --publish-token-file "$publish_token_file" \
            "${tls_extra[@]}"
        wait_http "http://127.0.0.1:$a/readyz" 60 "$RUN/pids/gateway-$n.pid" || {
            tail -n 40 "$RUN/logs/gateway-$n.log" >&2 || true
            die "gateway-$n did not become ready (log: $RUN/logs/gateway-$n.log)"
        }
        cluster_gateways+=("http://127.0.0.1:$p")
        cluster_admins+=("http://127.0.0.1:$a")
    done
fi

up_ok=1
gateway_url="http://127.0.0.1:$gw_port"
admin_url="http://127.0.0.1:$admin_port"
cat >"$RUN/env" <<EOF
# Written by ops/up.sh: the addresses of this run. Source it: . .run/env
# Every variable is exported: the portico CLI then reads PORTICO_REGISTRY,
# PORTICO_ADMIN_TOKEN_FILE, PORTICO_INTERNAL and PORTICO_PUBLISH_TOKEN_FILE from it.
PORTICO_GATEWAY=$gateway_url
PORTICO_GATEWAY_TLS=$tls_url
PORTICO_SANDBOX=http://127.0.0.1:$sandbox_port
PORTICO_ADMIN=$admin_url
PORTICO_INTERNAL=http://127.0.0.1:$internal_port
PORTICO_PUBLISH_TOKEN_FILE=$publish_token_file
PORTICO_REGISTRY=$registry_url
PORTICO_ADMIN_TOKEN_FILE=${registry_url:+$RUN/admin-token}
PORTICO_ZK=$zk_hosts
PORTICO_ZK_REGISTRY_AUTH_FILE=${registry_url:+$zk_auth/registry}
PORTICO_ZK_GATEWAY_AUTH_FILE=${registry_url:+$zk_auth/gateway}
PORTICO_ZK_OPERATOR_AUTH_FILE=${registry_url:+$zk_auth/operator}
PORTICO_SNAPSHOT_DIR=$( [ "$mode" = zk ] && echo "$RUN/snapshot")
PORTICO_CONFIG_DIR=$RUN/config
DEMO_HTTP=http://$demo_http
DEMO_GRPC=$demo_grpc
EOF
if [ "$cluster" = 1 ]; then
    cat >>"$RUN/env" <<EOF
PORTICO_GATEWAY_1=${cluster_gateways[0]}
PORTICO_GATEWAY_2=${cluster_gateways[1]}
PORTICO_GATEWAY_3=${cluster_gateways[2]}
PORTICO_ADMIN_1=${cluster_admins[0]}
PORTICO_ADMIN_2=${cluster_admins[1]}
PORTICO_ADMIN_3=${cluster_admins[2]}
PORTICO_REGISTRY_1=$registry_url
PORTICO_REGISTRY_2=$registry2_url
PORTICO_REDIS=$redis_url
PORTICO_REDIS_USER=portico
PORTICO_REDIS_PASSWORD_FILE=$redis_auth/redis-password
PORTICO_NOTIFY_KEY_FILE=$redis_auth/notify-key
EOF
fi

# Exported, so that `. .run/env` reaches the commands run after it (the portico CLI).
sed -i 's/^\([A-Z][A-Z0-9_]*=\)/export \1/' "$RUN/env"

# Prometheus: ops/prometheus/prometheus.yml with this run's admin addresses (every gateway)
# and the alerting rules next to it (docs/operations/monitoring.md, "Dashboards and scrape configuration").
prom_targets=""
for a in "${cluster_admins[@]}"; do prom_targets+="          - ${a#http://}"$'\n'; done
awk -v targets="$prom_targets" -v rules="$ROOT/ops/prometheus/" '
    /^      - targets:/ { print; printf "%s", targets; skip = 1; next }
    skip && /^          [-#]/ { next }
    { skip = 0 }
    /^  - "alerts\.yml"/ { sub(/"alerts/, "\"" rules "alerts") }
    { print }' "$ROOT/ops/prometheus/prometheus.yml" >"$RUN/prometheus.yml"

cat <<EOF

Portico is up ($profile build, $mode mode$( [ "$cluster" = 1 ] && echo ", cluster")).
  gateway        $gateway_url
  gateway TLS    ${tls_url:-off (--no-tls)}${tls_url:+   (HTTP/2 and HTTP/1.1; certificate $RUN/tls/cert.pem)}
  sandbox        http://127.0.0.1:$sandbox_port   (drafts, sandbox apps: each live app's key, its secret + "-sandbox")
  admin          $admin_url   (/metrics /healthz /readyz /status)
  notifications  http://127.0.0.1:$internal_port/internal/v1/notifications   (publisher token in $publish_token_file)
  registry       ${registry_url:-not running (standalone mode)}
  console        ${registry_url:+$registry_url/   (sign in with the token in $RUN/admin-token)}
  portal         ${registry_url:+$registry_url/portal/   (merchants: API catalogue, code, try it; no token)}
  ZooKeeper      $zk_hosts   $( [ "$mode" = zk ] && echo "(locked; credentials in $zk_auth/, zkCli as the operator: ./ops/zkcli.sh)")
  demo backend   http://$demo_http   (gRPC $demo_grpc)
  config         $( [ "$mode" = zk ] && echo "ZooKeeper $zk_hosts/portico (change it with the console or ./target/$profile/portico; snapshot in $RUN/snapshot)" || echo "$RUN/config (edit a file there; the gateway reloads it)")
$( [ "$cluster" = 1 ] && printf '  cluster        gateways %s, %s, %s (admin %s, %s, %s)\n                 registries %s, %s; Redis %s\n                 rolling restart: ./ops/restart-gateway.sh --all\n' \
    "${cluster_gateways[@]}" "${cluster_admins[@]}" "$registry_url" "$registry2_url" "$redis_url")
  logs           $RUN/logs/
  addresses      $RUN/env
  Prometheus     prometheus --config.file=$RUN/prometheus.yml   (Grafana: import ops/grafana/portico-fleet.json)

Try:
  curl -s $gateway_url/v1/health
${tls_url:+  curl -s --cacert $RUN/tls/cert.pem $tls_url/v1/health
}  python3 ops/sign.py --key merchant-1 --secret s3cr3t-value GET $gateway_url/v1/orders/42
  python3 ops/sign.py --key merchant-1 --secret s3cr3t-value --body '{"item":"book","qty":2}' POST $gateway_url/v1/orders
  python3 ops/sign.py --key merchant-1 --secret s3cr3t-value --curl GET $gateway_url/v1/orders/42
  python3 docs/examples/notify_client.py --gateway $gateway_url --app merchant-1 --secret s3cr3t-value &
  ./target/$profile/portico notify --gateway http://127.0.0.1:$internal_port --publish-token-file $publish_token_file --app merchant-1 --topic orders --payload '{"order_id":"42","status":"paid"}'
  curl -s $admin_url/status
  curl -s $admin_url/metrics | grep portico_
  . $RUN/env && ./target/$profile/portico status

Stop with ./ops/down.sh
EOF
