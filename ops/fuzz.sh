#!/usr/bin/env bash
# Portico's fuzzing (cargo-fuzz, libFuzzer) of the configuration parsers in portico-control:
#
#   ./ops/fuzz.sh [TARGET|all] [SECONDS]     (default: all, PORTICO_FUZZ_SECONDS or 60)
#   ./ops/fuzz.sh build                       only build the targets
#   ./ops/fuzz.sh list                        list the targets
#
# Targets are the files of fuzz/fuzz_targets/ (`all` runs each in turn, so a target added
# there, e.g. a JSON->protobuf transcoding one, is run without touching this script; its
# seeds go in ops/fuzz_seeds.py). Each run:
#   1. installs cargo-fuzz if `cargo fuzz` is missing (cargo install --locked, once);
#   2. builds the targets (RUSTC_BOOTSTRAP=1: the stable toolchain accepts cargo-fuzz's
#      nightly flags; release with debug assertions, so overflows panic; sanitizer none
#      unless PORTICO_FUZZ_SANITIZER says e.g. address: the code fuzzed has no unsafe);
#   3. seeds fuzz/corpus/TARGET from ops/examples/standalone and docs/PROTOCOL.md
#      (ops/fuzz_seeds.py; the corpus grows there across runs, git-ignored);
#   4. fuzzes each target for SECONDS (an input slower than PORTICO_FUZZ_TIMEOUT, 10 s,
#      counts as a crash: configuration must not stall either).
# A crash leaves its input in fuzz/artifacts/TARGET/; the script then exits non-zero.
# Reproduce one with `RUSTC_BOOTSTRAP=1 cargo fuzz run -s none TARGET fuzz/artifacts/TARGET/crash-...`
# (from fuzz/), and add it as a regression test in the crate it crashes.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$ROOT/fuzz"

export RUSTC_BOOTSTRAP=1
SANITIZER="${PORTICO_FUZZ_SANITIZER:-none}"
TIMEOUT="${PORTICO_FUZZ_TIMEOUT:-10}"
what="${1:-all}"
seconds="${2:-${PORTICO_FUZZ_SECONDS:-60}}"

targets() {
    local f
    for f in fuzz_targets/*.rs; do
        basename "$f" .rs
    done
}

ensure_cargo_fuzz() {
    if cargo fuzz --version >/dev/null 2>&1; then
        return 0
    fi
    log "installing cargo-fuzz (once)"
    cargo install cargo-fuzz --locked --quiet || die "cargo install cargo-fuzz failed"
}

build() {
    local t0=$SECONDS
    log "building the fuzz targets (sanitizer: $SANITIZER)"
    cargo fuzz build --sanitizer "$SANITIZER" --debug-assertions "$@"
    log "built in $((SECONDS - t0))s"
}

case "$what" in
list)
    targets
    exit 0
    ;;
build)
    ensure_cargo_fuzz
    build
    exit 0
    ;;
all) mapfile -t run < <(targets) ;;
*)
    [ -f "fuzz_targets/$what.rs" ] || die "no fuzz target '$what' (have: $(targets | tr '\n' ' '))"
    run=("$what")
    ;;
esac

ensure_cargo_fuzz
build
python3 "$ROOT/ops/fuzz_seeds.py" "${run[@]}"

failed=()
for t in "${run[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log "fuzzing $t for ${seconds}s"
    set +e
    cargo fuzz run --sanitizer "$SANITIZER" --debug-assertions "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout="$TIMEOUT" -rss_limit_mb=2048 \
        -print_final_stats=1 2>&1 |
        grep --line-buffered -v -E '^(#[0-9]+[[:space:]]+(NEW|REDUCE)|[[:space:]]+NEW_FUNC)'
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        warn "$t: crash or failure (exit $rc); inputs in fuzz/artifacts/$t/"
    fi
done

if [ "${#failed[@]}" -ne 0 ]; then
    die "fuzzing found problems in: ${failed[*]}"
fi
log "fuzzing ok: ${run[*]} (${seconds}s each)"
