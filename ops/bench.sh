#!/usr/bin/env bash
# Portico's benchmarks (a report, not a test: never run by ./ops/test.sh or CI).
#
#   ./ops/bench.sh [SUITE] [portico-bench options]
#
# Suites (time with the defaults on the 2-CPU machine):
#   edge          direct vs nginx vs bare Pingora vs nginx + Lua (the same
#                 signed edge, benches/peers/nginx-lua/) vs Portico, closed
#                 loop; the peer is checked first, as peer-check does          (~4 min)
#   peer-check    the nginx + Lua peer only: it accepts both signature vectors
#                 of docs/PROTOCOL.md and refuses a bad signature, a replay, a
#                 stale timestamp and an unknown app (401/403); no load        (~1 min)
#   grpc          transcoded gRPC vs HTTP passthrough through Portico          (~3 min)
#   isolation     API B while API A's backend hangs                            (~2 min)
#   switch        switch push / publish → live through ZooKeeper               (~1 min)
#   instructions  instructions per request under callgrind: Portico, bare
#                 Pingora, nginx (x --cg-reps), gRPC vs HTTP same bytes,
#                 top functions (the stable measure)                           (~15 min)
#   knobs         Pingora's knobs on the bare proxy, one at a time:
#                 instructions (callgrind) and CPU per request                 (~15 min)
#   apis          10,000 APIs vs 10 APIs: capacity, instructions, RSS          (~6 min)
#   idle          memory per idle keep-alive connection (10,000 each)          (~1 min)
#   latency       open-loop latency at 50% of saturation                       (~3 min)
#   replay        one app's sustained signed rate vs the replay cache
#                 (--soak-secs, 600 by default)                                (~11 min)
#   cache         a cache HIT, a MISS and the hot-key detector vs a proxied
#                 call: instructions (callgrind) and CPU per request          (~6 min)
#   routing       least_load + health checks + sticky vs round_robin:
#                 instructions (callgrind) and per-core capacity               (~5 min)
#   fleet         a cluster-scope rate limit with Redis vs local: cost at 1,000
#                 and 10,000 req/s; accuracy under uneven load, 3 gateways    (~3 min)
#   notify        notifications: publish → delivered latency at 1,000 events/s
#                 over 1,000 merchants' signed SSE streams (one TCP connection
#                 each), memory per idle stream (1,000 and 5,000), events/s one
#                 node sustains; with Redis and the memory store; raises its
#                 open-file limit to 20,000 (prlimit, root)                     (~5 min)
#   tls           TLS 1.3 (one generated P-256 certificate) and HTTP/2: full and
#                 resumed handshakes per core, requests per core on kept-alive
#                 TLS (HTTP/1.1 signed; HTTP/2 with h2load), Portico vs nginx vs
#                 nginx + Lua; fleet resumption over two gateways sharing ticket
#                 keys (--tls-others N, 10000), Portico and nginx                (~7 min)
#   all           every suite in turn                                          (~87 min)
#
# Installs what is missing (nginx-light, libnginx-mod-http-lua for the nginx + Lua peer,
# valgrind, ZooKeeper for the switch suite, nghttp2-client's h2load for tls), builds
# the release binaries, then runs target/release/portico-bench, which starts every process
# on free 127.0.0.1 ports, runs interleaved rounds and rewrites its generated sections of
# benches/RESULTS.md (the hand-written reading around them is kept) and its SVG plots in
# benches/plots/. Options (see `portico-bench --help`): --rounds N (5), --duration S (6),
# --warmup S (1), --connections N (32), --nice N (e.g. -10 on a machine shared with other
# work; needs root), --no-pin, --keep-tmp; callgrind: --calls N (4000), --cg-warmup N
# (1000), --cg-connections N (8), --cg-reps N (2); --idle-connections N (10000);
# --soak-secs S (600), --soak-rate R (10000); --tls-others N (10000).
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

suite="${1:-all}"
[ "$#" -gt 0 ] && shift

pkgs=(nginx-light cmake)
case "$suite" in switch | all) pkgs+=(zookeeper) ;; esac
case "$suite" in instructions | knobs | apis | cache | routing | all) pkgs+=(valgrind) ;; esac
# prlimit (idle and notify suites) and taskset come with util-linux.
case "$suite" in idle | notify | all) pkgs+=(util-linux) ;; esac
case "$suite" in fleet | notify | all) pkgs+=(redis-server redis-tools) ;; esac
case "$suite" in edge | peer-check | tls | all) pkgs+=(libnginx-mod-http-lua) ;; esac
# h2load for the tls suite's HTTP/2 load.
case "$suite" in tls | all) pkgs+=(nghttp2-client) ;; esac
ensure_packages "${pkgs[@]}"

# check_nginx_lua: the nginx + Lua peer needs the Lua module built on LuaJIT with its FFI
# and libcrypto loadable by the soname the harness gives it (the one nginx links, .so.3 on
# bookworm). `nginx -t` skips init_by_lua, so a throw-away nginx runs it for real and
# exits from it (no listener): status 0 only when both hold.
check_nginx_lua() {
    local mods=/usr/lib/nginx/modules soname dir
    [ -f "$mods/ngx_http_lua_module.so" ] || die "libnginx-mod-http-lua is not installed"
    soname="$(/sbin/ldconfig -p | awk '$1 == "libcrypto.so.3" {print $1; exit}')"
    [ -n "$soname" ] || soname="$(/sbin/ldconfig -p | awk '$1 ~ /^libcrypto\.so\./ {print $1; exit}')"
    [ -n "$soname" ] || die "libcrypto not found by ldconfig (apt-get install libssl3)"
    dir="$(mktemp -d)"
    cat >"$dir/nginx.conf" <<EOF
load_module $mods/ndk_http_module.so;
load_module $mods/ngx_http_lua_module.so;
daemon off;
master_process off;
pid $dir/nginx.pid;
events {}
http {
    init_by_lua_block {
        local ok, ffi = pcall(require, "ffi")
        assert(ok and jit, "the Lua module is not built on LuaJIT with FFI")
        ffi.cdef("int CRYPTO_memcmp(const void *a, const void *b, size_t len);")
        assert(ffi.load("$soname").CRYPTO_memcmp("ab", "ab", 2) == 0, "libcrypto via FFI")
        os.exit(0)
    }
}
EOF
    if ! timeout 30 nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" 2>"$dir/err"; then
        cat "$dir/err" >&2
        rm -rf "$dir"
        die "the nginx Lua module cannot run the peer (LuaJIT FFI, $soname)"
    fi
    rm -rf "$dir"
    log "nginx + Lua: LuaJIT with FFI, libcrypto as $soname"
}
case "$suite" in edge | peer-check | tls | all) check_nginx_lua ;; esac

crates=(-p portico-gateway -p portico-demo -p portico-benches)
case "$suite" in peer-check) crates=(-p portico-demo -p portico-benches) ;; esac
case "$suite" in switch | all) crates+=(-p portico-registry) ;; esac
log "building release binaries"
cargo build --release "${crates[@]}"

log "portico-bench $suite $*"
exec "$ROOT/target/release/portico-bench" "$suite" --results "$ROOT/benches/RESULTS.md" "$@"
