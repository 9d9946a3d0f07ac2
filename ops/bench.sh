#!/usr/bin/env bash
# Portico's benchmarks (a report, not a test: never run by ./ops/test.sh or CI).
#
#   ./ops/bench.sh [edge|grpc|isolation|switch|all] [portico-bench options]
#
# Installs what is missing (nginx-light, ZooKeeper for the switch suite), builds the release
# binaries, then runs target/release/portico-bench, which starts every process on free
# 127.0.0.1 ports, runs interleaved rounds and rewrites its generated sections of
# benches/RESULTS.md (the hand-written reading around them is kept). Options (see
# `portico-bench --help`): --rounds N (5), --duration S (6), --warmup S (1),
# --connections N (32), --nice N (e.g. -10 on a machine shared with other work; needs
# root), --no-pin, --keep-tmp. `all` takes about 8 minutes with the defaults.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

suite="${1:-all}"
[ "$#" -gt 0 ] && shift

pkgs=(nginx-light cmake)
case "$suite" in switch | all) pkgs+=(zookeeper) ;; esac
ensure_packages "${pkgs[@]}"

crates=(-p portico-gateway -p portico-demo -p portico-benches)
case "$suite" in switch | all) crates+=(-p portico-registry) ;; esac
log "building release binaries"
cargo build --release "${crates[@]}"

log "portico-bench $suite $*"
exec "$ROOT/target/release/portico-bench" "$suite" --results "$ROOT/benches/RESULTS.md" "$@"
