#!/usr/bin/env bash
# Portico's benchmarks (a report, not a test: never run by ./ops/test.sh or CI).
#
#   ./ops/bench.sh [SUITE] [portico-bench options]
#
# Suites (time with the defaults on the 2-CPU machine):
#   edge          direct vs nginx vs bare Pingora vs Portico, closed loop       (~3 min)
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
#   all           every suite in turn                                          (~80 min)
#
# Installs what is missing (nginx-light, valgrind, ZooKeeper for the switch suite), builds
# the release binaries, then runs target/release/portico-bench, which starts every process
# on free 127.0.0.1 ports, runs interleaved rounds and rewrites its generated sections of
# benches/RESULTS.md (the hand-written reading around them is kept) and its SVG plots in
# benches/plots/. Options (see `portico-bench --help`): --rounds N (5), --duration S (6),
# --warmup S (1), --connections N (32), --nice N (e.g. -10 on a machine shared with other
# work; needs root), --no-pin, --keep-tmp; callgrind: --calls N (4000), --cg-warmup N
# (1000), --cg-connections N (8), --cg-reps N (2); --idle-connections N (10000);
# --soak-secs S (600), --soak-rate R (10000).
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
ensure_packages "${pkgs[@]}"

crates=(-p portico-gateway -p portico-demo -p portico-benches)
case "$suite" in switch | all) crates+=(-p portico-registry) ;; esac
log "building release binaries"
cargo build --release "${crates[@]}"

log "portico-bench $suite $*"
exec "$ROOT/target/release/portico-bench" "$suite" --results "$ROOT/benches/RESULTS.md" "$@"
