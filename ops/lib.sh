# shellcheck shell=bash
# Shared functions of the ops scripts. Source it: `. "$(dirname "$0")/lib.sh"`.
# Sets ROOT (the checkout) and RUN (its state dir, .run/, git-ignored).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="${PORTICO_RUN_DIR:-$ROOT/.run}"
ZK_BIN="${PORTICO_ZK_BIN:-/usr/share/zookeeper/bin}"

# cargo may live in ~/.cargo/bin without being on PATH (CI, sudo, cron).
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
    export PATH
fi

log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# ensure_packages PKG...: installs the Debian packages that are missing (as root, or
# through sudo); runs `apt-get update` only when something has to be installed.
ensure_packages() {
    local missing=() p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root to install: ${missing[*]}"
        sudo=(sudo)
    fi
    log "installing ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
        die "apt-get update failed"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install ${missing[*]} failed"
}

# port_is_free PORT: whether 127.0.0.1:PORT can be bound now.
port_is_free() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
EOF
}

# free_port: prints a port that is free on 127.0.0.1 now, below the kernel's ephemeral
# range (a bind(0) port is an ephemeral one, which any outgoing connection, a test's
# included, may take before the server binds it; testkit's free_port does the same).
free_port() {
    python3 - <<'PY'
import random, socket
try:
    high = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError):
    high = 32768
for _ in range(2000):
    port = random.randrange(10000, high) if high > 11000 else 0
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        print(s.getsockname()[1])
        break
    except OSError:
        continue
    finally:
        s.close()
PY
}

# pick_port PREFERRED: PREFERRED when free, else any free port. With PORTICO_ANY_PORT=1,
# always any free port (tests run ./ops/up.sh that way: never a fixed port).
pick_port() {
    if [ "${PORTICO_ANY_PORT:-0}" != 1 ] && port_is_free "$1"; then echo "$1"; else free_port; fi
}

# wait_tcp PORT SECONDS: waits until something accepts on 127.0.0.1:PORT.
wait_tcp() {
    local port="$1" secs="${2:-30}" i
    for ((i = 0; i < secs * 10; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

# wait_http URL SECONDS [PIDFILE]: waits until URL answers 2xx; gives up early when the
# process of PIDFILE has died.
wait_http() {
    local url="$1" secs="${2:-30}" pidfile="${3:-}" i
    for ((i = 0; i < secs * 10; i++)); do
        if curl -fsS -o /dev/null --max-time 2 --noproxy '*' "$url" 2>/dev/null; then return 0; fi
        if [ -n "$pidfile" ] && ! pid_alive "$pidfile"; then return 1; fi
        sleep 0.1
    done
    return 1
}

# start_bg NAME LOGFILE CMD...: starts CMD in its own session (so the whole group can be
# stopped), output to LOGFILE, pid in $RUN/pids/NAME.pid.
start_bg() {
    local name="$1" logfile="$2"
    shift 2
    mkdir -p "$RUN/pids"
    setsid "$@" >"$logfile" 2>&1 </dev/null &
    echo "$!" >"$RUN/pids/$name.pid"
}

# pid_alive PIDFILE
pid_alive() {
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# stop_pidfile PIDFILE: stops the process group started by start_bg (INT, then TERM, then
# KILL), and removes the pid file.
stop_pidfile() {
    local pidfile="$1" pid i sig
    [ -f "$pidfile" ] || return 0
    pid="$(cat "$pidfile")"
    for sig in INT TERM KILL; do
        kill -0 "$pid" 2>/dev/null || break
        kill -"$sig" -- "-$pid" 2>/dev/null || kill -"$sig" "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    rm -f "$pidfile"
}

# zk_ok PORT: whether the ZooKeeper on 127.0.0.1:PORT serves requests (four-letter `srvr`).
zk_ok() {
    python3 - "$1" <<'EOF'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
        s.sendall(b"srvr")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
except OSError:
    sys.exit(1)
sys.exit(0 if b"Mode:" in data else 1)
EOF
}

# zk_credentials DIR: the three ZooKeeper identities (docs/operations/zookeeper.md, "ZooKeeper
# credentials and ACLs") as DIR/registry, DIR/gateway, DIR/operator, each `user:password`
# with a random password, mode 0600. Made once: existing files are kept (and their modes fixed).
zk_credentials() {
    local dir="$1" role
    (umask 077 && mkdir -p "$dir")
    chmod 700 "$dir"
    for role in registry gateway operator; do
        if [ ! -s "$dir/$role" ]; then
            (umask 077 && python3 -c 'import secrets,sys; print(f"portico-{sys.argv[1]}:{secrets.token_hex(24)}")' "$role" >"$dir/$role")
        fi
        chmod 600 "$dir/$role"
    done
}

# start_zookeeper DIR PORT: a private ZooKeeper (Debian's package) with its config, data and
# logs in DIR, on 127.0.0.1:PORT; pid in $RUN/pids/zookeeper.pid. Waits until it serves.
# PORTICO_ZK_SUPER_DIGEST=super:<base64 sha1> turns on ZooKeeper's superDigest (the
# break-glass identity, docs/OPERATIONS.md); off by default.
start_zookeeper() {
    local dir="$1" port="$2" i jvm="-Xmx256m"
    [ -x "$ZK_BIN/zkServer.sh" ] || die "ZooKeeper not found at $ZK_BIN (apt-get install zookeeper)"
    mkdir -p "$dir/data" "$dir/logs"
    cat >"$dir/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
maxClientCnxns=200
EOF
    if [ -n "${PORTICO_ZK_SUPER_DIGEST:-}" ]; then
        warn "ZooKeeper superDigest on (break-glass): whoever knows its password bypasses every ACL"
        jvm="$jvm -Dzookeeper.DigestAuthenticationProvider.superDigest=$PORTICO_ZK_SUPER_DIGEST"
    fi
    start_bg zookeeper "$dir/logs/stdout.log" \
        env ZOOCFGDIR="$dir" ZOO_LOG_DIR="$dir/logs" JMXDISABLE=true \
        SERVER_JVMFLAGS="$jvm" \
        "$ZK_BIN/zkServer.sh" start-foreground "$dir/zoo.cfg"
    for ((i = 0; i < 300; i++)); do
        if zk_ok "$port"; then return 0; fi
        pid_alive "$RUN/pids/zookeeper.pid" || break
        sleep 0.1
    done
    tail -n 30 "$dir/logs/stdout.log" >&2 || true
    die "ZooKeeper did not start on 127.0.0.1:$port (log: $dir/logs/stdout.log)"
}

# --- a cluster on this machine (./ops/up.sh --cluster; docs/operations/cluster.md, "Running a
# cluster") ----------------------------------------------------------------------------
# start_zk_ensemble DIR PORT1 PORT2 PORT3: a three-server ZooKeeper ensemble (Debian's
# package) on 127.0.0.1, server N's config, data and logs in DIR/N, client port PORTn, pid
# in $RUN/pids/zookeeper-N.pid. Waits until the ensemble has a quorum (every server serves).
start_zk_ensemble() {
    local dir="$1" i n
    shift
    local ports=("$@") servers=""
    [ -x "$ZK_BIN/zkServer.sh" ] || die "ZooKeeper not found at $ZK_BIN (apt-get install zookeeper)"
    for n in 1 2 3; do
        servers+="server.$n=127.0.0.1:$(free_port):$(free_port)"$'\n'
    done
    for n in 1 2 3; do
        mkdir -p "$dir/$n/data" "$dir/$n/logs"
        echo "$n" >"$dir/$n/data/myid"
        cat >"$dir/$n/zoo.cfg" <<EOF
tickTime=1000
initLimit=10
syncLimit=5
dataDir=$dir/$n/data
clientPort=${ports[$((n - 1))]}
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
maxClientCnxns=200
$servers
EOF
        start_bg "zookeeper-$n" "$dir/$n/logs/stdout.log" \
            env ZOOCFGDIR="$dir/$n" ZOO_LOG_DIR="$dir/$n/logs" JMXDISABLE=true \
            SERVER_JVMFLAGS="-Xmx128m" \
            "$ZK_BIN/zkServer.sh" start-foreground "$dir/$n/zoo.cfg"
    done
    for ((i = 0; i < 600; i++)); do
        if zk_ok "${ports[0]}" && zk_ok "${ports[1]}" && zk_ok "${ports[2]}"; then return 0; fi
        sleep 0.1
    done
    tail -n 30 "$dir"/*/logs/stdout.log >&2 || true
    die "the ZooKeeper ensemble did not reach a quorum (logs: $dir/*/logs/)"
}

# redis_credentials DIR: the Redis ACL user `portico`'s password (DIR/redis-password) and the
# notification key (DIR/notify-key: every stream entry's MAC, a key Redis never holds), both
# random, mode 0600, in DIR (0700). Made once: existing files are kept (and their modes fixed).
redis_credentials() {
    local dir="$1" f
    (umask 077 && mkdir -p "$dir")
    chmod 700 "$dir"
    for f in redis-password notify-key; do
        [ -s "$dir/$f" ] ||
            (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' >"$dir/$f")
        chmod 600 "$dir/$f"
    done
}

# redis_ok PORT [PASSWORD_FILE]: whether the Redis on 127.0.0.1:PORT answers PING (as the ACL
# user `portico` with the password in PASSWORD_FILE when given).
redis_ok() {
    python3 - "$1" "${2:-}" <<'EOF'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1) as s:
        if sys.argv[2]:
            pw = open(sys.argv[2]).read().strip().encode()
            s.sendall(b"*3\r\n$4\r\nAUTH\r\n$7\r\nportico\r\n$%d\r\n%s\r\n" % (len(pw), pw))
            if not s.recv(64).startswith(b"+OK"):
                sys.exit(1)
        s.sendall(b"PING\r\n")
        sys.exit(0 if s.recv(64).startswith(b"+PONG") else 1)
except OSError:
    sys.exit(1)
EOF
}

# start_redis PORT CREDENTIALS_DIR: Debian's redis-server on 127.0.0.1:PORT without
# persistence (the fleet's counters and nonces are short-lived), pid in $RUN/pids/redis.pid.
# Authenticated (docs/operations/cluster.md, "Redis credentials and TLS"): the `default` user is off
# and the one user, `portico`, is limited to the `portico:*` keys and channels, without the
# dangerous commands (FLUSHALL, CONFIG, ACL, ...); the ACL file holds the SHA-256 of its
# password, never the password, and the server's command line names only its config file
# (both 0600). Waits for PONG.
start_redis() {
    local port="$1" creds="$2" i hash
    command -v redis-server >/dev/null 2>&1 || ensure_packages redis-server
    hash="$(python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1]).read().strip().encode()).hexdigest())' "$creds/redis-password")"
    (
        umask 077
        printf 'user default off\nuser portico on #%s ~portico:* &portico:* +@all -@dangerous\n' "$hash" >"$RUN/redis-users.acl"
        printf 'port %s\nbind 127.0.0.1\nsave ""\nappendonly no\ndir %s\naclfile %s\n' \
            "$port" "$RUN" "$RUN/redis-users.acl" >"$RUN/redis.conf"
    )
    start_bg redis "$RUN/logs/redis.log" redis-server "$RUN/redis.conf"
    for ((i = 0; i < 300; i++)); do
        if redis_ok "$port" "$creds/redis-password"; then return 0; fi
        pid_alive "$RUN/pids/redis.pid" || break
        sleep 0.1
    done
    die "Redis did not start on 127.0.0.1:$port (log: $RUN/logs/redis.log)"
}

# wait_ready_line LOGFILE PREFIX SECONDS PIDFILE: waits for a line starting with PREFIX in
# LOGFILE and prints it.
wait_ready_line() {
    local logfile="$1" prefix="$2" secs="$3" pidfile="$4" i line
    for ((i = 0; i < secs * 10; i++)); do
        line="$(grep -m1 "^$prefix " "$logfile" 2>/dev/null || true)"
        if [ -n "$line" ]; then
            echo "$line"
            return 0
        fi
        pid_alive "$pidfile" || return 1
        sleep 0.1
    done
    return 1
}

# ready_field LINE KEY: the value of KEY=VALUE in a readiness line.
ready_field() {
    local word
    for word in $1; do
        case "$word" in "$2="*) echo "${word#*=}" ;; esac
    done
}

# ensure_local_tls DIR: a self-signed certificate for localhost and 127.0.0.1 in DIR/cert.pem
# with its key in DIR/key.pem (P-256, mode 0600), for the gateway's local TLS listener.
# Generated once and kept; made again only when missing, unreadable or expiring within a day.
# Each file is written aside and renamed, so a running gateway never reads half a file.
ensure_local_tls() {
    local dir="$1"
    command -v openssl >/dev/null 2>&1 || ensure_packages openssl
    if [ -s "$dir/cert.pem" ] && [ -s "$dir/key.pem" ] &&
        openssl x509 -in "$dir/cert.pem" -noout -checkend 86400 >/dev/null 2>&1; then
        return 0
    fi
    log "generating a local TLS certificate in $dir (CN=localhost, 127.0.0.1)"
    mkdir -p "$dir"
    chmod 700 "$dir"
    (
        umask 077
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
            -days 365 -subj /CN=localhost \
            -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
            -keyout "$dir/.key.pem.new" -out "$dir/.cert.pem.new" 2>/dev/null
    ) || die "openssl could not generate the local TLS certificate"
    chmod 600 "$dir/.key.pem.new"
    chmod 644 "$dir/.cert.pem.new"
    mv -f "$dir/.key.pem.new" "$dir/key.pem"
    mv -f "$dir/.cert.pem.new" "$dir/cert.pem"
}

# Schemathesis (PyPI), the property-based fuzzer of the registry's admin API
# (registry/tests/it/schemathesis.rs, docs/SECURITY.md "Admin API (registry)"), pinned.
SCHEMATHESIS_VERSION="4.32.5"
SCHEMATHESIS_VENV="$RUN/venv"

# ensure_schemathesis: a Python venv at $SCHEMATHESIS_VENV with schemathesis
# $SCHEMATHESIS_VERSION (pip from PyPI); reused when it already has that version. Prints the
# path of its `st` command.
ensure_schemathesis() {
    local venv="$SCHEMATHESIS_VENV" have=""
    if [ -x "$venv/bin/st" ] && [ -x "$venv/bin/python" ]; then
        have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null || true)"
    fi
    if [ "$have" != "$SCHEMATHESIS_VERSION" ]; then
        if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
            rm -rf "$venv"
            mkdir -p "$(dirname "$venv")"
            # Debian's python3 makes venvs (with pip) only with python3-venv installed.
            if ! python3 -m venv "$venv" >/dev/null 2>&1; then
                rm -rf "$venv"
                ensure_packages python3-venv
                python3 -m venv "$venv" >&2 || die "python3 -m venv $venv failed"
            fi
        fi
        log "installing schemathesis==$SCHEMATHESIS_VERSION into $venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            "schemathesis==$SCHEMATHESIS_VERSION" >&2 ||
            die "pip install schemathesis==$SCHEMATHESIS_VERSION failed"
    fi
    echo "$venv/bin/st"
}

# openapi-spec-validator (PyPI), which checks the developer portal's generated OpenAPI 3.1
# documents in registry/tests/it/portal.rs, pinned; installed into the same venv.
OPENAPI_VALIDATOR_VERSION="0.9.0"

# ensure_openapi_validator: openapi-spec-validator $OPENAPI_VALIDATOR_VERSION in the venv of
# ensure_schemathesis (made first if need be); reused when present. Prints the venv's python.
ensure_openapi_validator() {
    ensure_schemathesis >/dev/null || return 1
    local py="$SCHEMATHESIS_VENV/bin/python" have=""
    have="$("$py" -c 'import importlib.metadata as m; print(m.version("openapi-spec-validator"))' 2>/dev/null || true)"
    if [ "$have" != "$OPENAPI_VALIDATOR_VERSION" ]; then
        log "installing openapi-spec-validator==$OPENAPI_VALIDATOR_VERSION into $SCHEMATHESIS_VENV"
        "$py" -m pip install --quiet --disable-pip-version-check \
            "openapi-spec-validator==$OPENAPI_VALIDATOR_VERSION" >&2 ||
            die "pip install openapi-spec-validator==$OPENAPI_VALIDATOR_VERSION failed"
    fi
    echo "$py"
}

# grpcio and protobuf (PyPI), the real gRPC server (C-core) that gateway/tests/it/grpc_interop.rs
# puts behind generic invocation (gateway/tests/grpcio_server.py), pinned; installed into the
# venv of ensure_schemathesis.
GRPCIO_VERSION="1.85.1"
PROTOBUF_VERSION="7.36.2"

# ensure_grpcio: grpcio $GRPCIO_VERSION and protobuf $PROTOBUF_VERSION in the venv of
# ensure_schemathesis (made first if need be); reused when present. Prints the venv's python.
ensure_grpcio() {
    ensure_schemathesis >/dev/null || return 1
    local py="$SCHEMATHESIS_VENV/bin/python" have=""
    have="$("$py" -c 'import importlib.metadata as m; print(m.version("grpcio"), m.version("protobuf"))' 2>/dev/null || true)"
    if [ "$have" != "$GRPCIO_VERSION $PROTOBUF_VERSION" ]; then
        log "installing grpcio==$GRPCIO_VERSION protobuf==$PROTOBUF_VERSION into $SCHEMATHESIS_VENV"
        "$py" -m pip install --quiet --disable-pip-version-check \
            "grpcio==$GRPCIO_VERSION" "protobuf==$PROTOBUF_VERSION" >&2 ||
            die "pip install grpcio==$GRPCIO_VERSION protobuf==$PROTOBUF_VERSION failed"
    fi
    echo "$py"
}

# @grpc/grpc-js and @grpc/proto-loader (npm), the second real gRPC server of
# gateway/tests/it/grpc_interop.rs (gateway/tests/grpcjs_server.js), pinned by
# gateway/tests/grpcjs/package.json and its package-lock.json.
GRPCJS_DIR="$ROOT/gateway/tests/grpcjs"

# ensure_grpcjs: `npm ci` into $GRPCJS_DIR/node_modules (git-ignored) when it does not match
# the lock file (a hash of package-lock.json is kept in node_modules/.portico-lock.sha256
# after a successful install, as admin-ui/build.sh does); reused when it does. Needs node and
# npm (ops/test.sh installs them). Prints the directory (PORTICO_GRPCJS_DIR for the tests).
ensure_grpcjs() {
    local dir="$GRPCJS_DIR" stamp want
    command -v npm >/dev/null 2>&1 || die "npm is not installed (apt-get install nodejs npm)"
    stamp="$dir/node_modules/.portico-lock.sha256"
    want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        log "installing @grpc/grpc-js and @grpc/proto-loader (npm ci) into $dir/node_modules"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
            die "npm ci in $dir failed"
        echo "$want" >"$stamp"
    fi
    echo "$dir"
}

# ensure_grpcjava: the third real gRPC server of gateway/tests/it/grpc_interop.rs, grpc-java 1.41
# on Netty (gateway/tests/grpcjava/InteropServer.java), from Debian's packages only
# (default-jdk-headless, libgrpc-java, libprotobuf-java, libnetty-java and what they need;
# installed when missing, as root or through sudo): gateway/tests/grpcjava/build.sh
# compiles it into $RUN/grpcjava when its source, classpath or JDK changed (reused
# otherwise) and writes its launcher. Prints the launcher (PORTICO_GRPCJAVA_RUN for the
# tests).
ensure_grpcjava() {
    "$ROOT/gateway/tests/grpcjava/build.sh"
}
