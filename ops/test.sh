#!/usr/bin/env bash
# Portico's test run (what CI runs, through .ci/run):
#   1. installs what the tests need and is missing (Debian packages, as root or via sudo;
#      schemathesis, openapi-spec-validator, grpcio and protobuf, pinned, from PyPI into the venv .run/venv,
#      reused when present);
#   2. checks the signing vectors of ops/sign.py and that docs/PROTOCOL.md's worked examples
#      and Python snippet agree with them (ops/check_docs.py); builds the console
#      (admin-ui/build.sh: npm ci when needed, then the type check and vite build);
#   3. cargo fmt --check;
#   4. cargo build --workspace --all-targets (so every binary the tests launch exists:
#      portico-gateway, portico-demo-backend, portico-registry, ... in target/debug/);
#   5. cargo test --workspace --no-fail-fast (the tests start their own ZooKeeper, demo
#      backend and gateway processes on free 127.0.0.1 ports);
#   6. a fuzzing smoke run: ./ops/fuzz.sh all runs each cargo-fuzz target of fuzz/ for
#      PORTICO_FUZZ_SECONDS seconds (default 20; 0 skips the step; its build is its own,
#      in fuzz/target, with cargo-fuzz installed first if missing);
#   7. cargo clippy --workspace --all-targets -- -D warnings;
# then prints a summary and exits non-zero if any step failed.
#
#   ./ops/test.sh [extra cargo test args, e.g. -p portico-gateway or a test-name filter]
#
# PORTICO_SKIP_LINT=1 skips steps 3 and 7. Logs: .run/test/.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

logdir="$RUN/test"
mkdir -p "$logdir"
started=$SECONDS
declare -a step_names=() step_results=()
failed=0

# step NAME CMD...: runs CMD with its output to the terminal and to $logdir/NAME.log.
step() {
    local name="$1" t0=$SECONDS rc=0
    shift
    log "$name: $*"
    set +e
    "$@" 2>&1 | tee "$logdir/$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    step_names+=("$name")
    if [ "$rc" -eq 0 ]; then
        step_results+=("ok      $((SECONDS - t0))s")
    else
        step_results+=("FAILED  $((SECONDS - t0))s (exit $rc, log $logdir/$name.log)")
        failed=1
    fi
    return "$rc"
}

# --- 1. packages -------------------------------------------------------------------------
# cmake: Pingora's zlib-ng; zookeeper: the real ZooKeeper the integration tests start.
ensure_packages cmake zookeeper curl python3
# redis-server: the shared counters and nonces of gateway/tests/cluster.rs (a fleet of
# gateways; portico_testkit::Redis starts it on a free port).
ensure_packages redis-server
# prometheus: promtool checks ops/prometheus/*.yml and gateway/tests/dashboards.rs runs every
# panel query of ops/grafana/portico-fleet.json on a real Prometheus scraping a gateway.
ensure_packages prometheus
# iproute2: `ip netns` for gateway/tests/netns.rs (ZooKeeper servers and gateways on
# namespaced hosts joined by veth pairs; the test needs root).
ensure_packages iproute2
# --- browser tests (console e2e): Debian's Chromium, and the console's npm toolchain ------
# registry/tests/console_e2e.rs drives /usr/bin/chromium with playwright-core (no browser
# download) and fails, saying why, when Chromium or admin-ui/node_modules is missing.
ensure_packages chromium chromium-driver fonts-liberation
command -v npm >/dev/null 2>&1 || ensure_packages nodejs npm
# --- admin API fuzzing: schemathesis (PyPI, pinned in ops/lib.sh) in .run/venv --------------
# registry/tests/schemathesis.rs runs it against the registry's OpenAPI document and fails,
# saying how to install it, when it is missing.
if st="$(ensure_schemathesis)"; then
    export PORTICO_SCHEMATHESIS="$st"
else
    warn "schemathesis could not be installed: registry/tests/schemathesis.rs will fail"
fi
# --- the developer portal's OpenAPI documents: openapi-spec-validator (PyPI, pinned) ------
# registry/tests/portal.rs validates them with it and fails, saying how to install it; its
# curl snippet signs with openssl.
ensure_packages openssl
if py="$(ensure_openapi_validator)"; then
    export PORTICO_OPENAPI_PYTHON="$py"
else
    warn "openapi-spec-validator could not be installed: registry/tests/portal.rs will fail"
fi
# --- real gRPC servers behind generic invocation: grpcio + protobuf (PyPI, pinned) --------
# gateway/tests/grpc_interop.rs starts gateway/tests/grpcio_server.py with this interpreter
# and fails, saying how to install them, when they are missing.
if py="$(ensure_grpcio)"; then
    export PORTICO_GRPCIO_PYTHON="$py"
else
    warn "grpcio could not be installed: gateway/tests/grpc_interop.rs will fail"
fi
# ------------------------------------------------------------------------------------------
export PORTICO_ZK_BIN="$ZK_BIN"

# --- 2..7 ----------------------------------------------------------------------------------
step sign-vectors python3 ops/sign.py --self-test || true
# The console: npm ci (only when node_modules is not the lock file's) and the build.
step console admin-ui/build.sh || true
step protocol-doc python3 ops/check_docs.py || true
if [ "${PORTICO_SKIP_LINT:-0}" != 1 ]; then
    step fmt cargo fmt --all -- --check || true
fi
if step build cargo build --workspace --all-targets; then
    if [ "$#" -eq 0 ]; then
        step test cargo test --workspace --no-fail-fast || true
    else
        # A virtual workspace tests every member unless -p narrows it.
        step test cargo test --no-fail-fast "$@" || true
    fi
else
    warn "build failed: tests not run"
fi
# Fuzzing smoke run (each target a short while; long runs: ./ops/fuzz.sh all SECONDS).
if [ "${PORTICO_FUZZ_SECONDS:-20}" != 0 ]; then
    step fuzz ./ops/fuzz.sh all "${PORTICO_FUZZ_SECONDS:-20}" || true
fi
if [ "${PORTICO_SKIP_LINT:-0}" != 1 ]; then
    step clippy cargo clippy --workspace --all-targets -- -D warnings || true
fi

# --- summary -------------------------------------------------------------------------------
passed=0 tfailed=0 ignored=0
if [ -f "$logdir/test.log" ] && grep -q '^test result:' "$logdir/test.log"; then
    read -r passed tfailed ignored < <(awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i+1) ~ /^passed/)  p += $i
                if ($(i+1) ~ /^failed/)  f += $i
                if ($(i+1) ~ /^ignored/) g += $i
            }
        } END { print p+0, f+0, g+0 }' "$logdir/test.log")
fi

echo
echo "================ Portico test summary ($((SECONDS - started))s) ================"
for i in "${!step_names[@]}"; do
    printf '  %-13s %s\n' "${step_names[$i]}" "${step_results[$i]}"
done
if [ "$tfailed" -gt 0 ]; then
    echo "  failing tests:"
    grep -E '^test .* \.\.\. FAILED$' "$logdir/test.log" | sed 's/^test /    /; s/ \.\.\. FAILED$//' || true
    # Why, in a few lines each (the whole output is in the log): the failing tests' panics.
    echo "  why (the first lines of each failing test's panic):"
    grep -a -E '^test .* \.\.\. FAILED$' "$logdir/test.log" | sed 's/^test //; s/ \.\.\. FAILED$//' | head -n 10 |
        while read -r name; do
            grep -a -A4 -F "thread '$name' " "$logdir/test.log" |
                grep -a -v -E '^(stack backtrace:|note: run with|--$)' | head -n 8 | sed 's/^/    /'
        done || true
fi
if [ "$ignored" -gt 0 ]; then echo "  ($ignored ignored)"; fi
if [ "$failed" -ne 0 ]; then
    echo "RESULT: FAILED"
else
    echo "RESULT: ok"
fi
echo "tests: $passed passed, $tfailed failed"
exit "$failed"
