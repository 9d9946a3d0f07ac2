#!/usr/bin/env bash
# Portico's test run (what CI runs, through .ci/run):
#   1. installs what the tests need and is missing (Debian packages, as root or via sudo;
#      schemathesis, openapi-spec-validator, grpcio and protobuf, pinned, from PyPI into the venv .run/venv,
#      reused when present; @grpc/grpc-js, pinned, npm ci into gateway/tests/grpcjs/node_modules;
#      the grpc-java interop server, from Debian's packages, compiled into .run/grpcjava);
#   2. checks the signing vectors of ops/sign.py and that docs/PROTOCOL.md's worked examples
#      and Python snippet agree with them, that no comment, UI text or doc cites a section or
#      issue a reader cannot open, and that docs/ARCHITECTURE.md names every source file
#      (ops/check_docs.py); builds the console (admin-ui/build.sh: npm ci when needed, the
#      generated console types checked against the OpenAPI, the type check and vite build);
#   3. cargo fmt --check;
#   4. cargo build --workspace --all-targets (so every binary the tests launch exists:
#      portico-gateway, portico-demo-backend, portico-registry, ... in target/debug/);
#   5. cargo test --workspace --no-fail-fast (the tests start their own ZooKeeper, demo
#      backend and gateway processes on free 127.0.0.1 ports); beside it, in the background,
#      the slow lane (step slow-lane, log .run/test/slow-lane.log): the #[ignore]d tests of
#      gateway/tests/it/grpc_interop.rs (a 3-minute call, 6 minutes idle, a restart under load;
#      minutes of waiting, little CPU), run when gateway/src/invoke differs from the tree it
#      last passed on (ops/slow-lane.stamp; always outside a git checkout), always with
#      --slow; a pass rewrites the stamp (commit it). Joined before the summary;
#   5b. on a full run, the README's quick start: ops/check_quickstart.py starts a fresh
#      ./ops/up.sh (debug build, free ports, its own run directory) and runs every command
#      of README.md's "What to try next", checking each answer;
#   6. a fuzzing smoke run: ./ops/fuzz.sh all runs each cargo-fuzz target of fuzz/ for
#      PORTICO_FUZZ_SECONDS seconds (default 10; 0 skips the step; its build is its own,
#      in fuzz/target, with cargo-fuzz installed first if missing);
#   7. cargo clippy --workspace --all-targets -- -D warnings;
# then prints a summary and exits non-zero if any step failed.
#
#   ./ops/test.sh [--slow] [extra cargo test args, e.g. -p portico-gateway or a test-name filter]
#   ./ops/test.sh --quick [extra cargo test args, e.g. a test-name filter]
#
# With cargo test args (a partial run) the slow lane runs only when --slow is given.
# PORTICO_SKIP_LINT=1 skips steps 3 and 7. Logs: .run/test/.
#
# --quick is the loop to run while working (docs/operations/ops-scripts.md, "Test lanes"): step 1, then
# cargo build --workspace --bins and the quick lane: every crate's unit tests (--lib --bins)
# and the integration-test binaries of $quick_tests below, the ones that finish in a few
# seconds each, with the modules of $quick_gateway of the gateway's one integration-test
# binary (gateway/tests/it/main.rs) and those of $quick_registry, $quick_control and
# $quick_demo of the registry's, control's and demo's (<crate>/tests/it/main.rs); no console
# build, doc checks, fmt, slow lane, quick start, fuzz or clippy. Same summary.
set -euo pipefail
# shellcheck source=ops/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

slow=auto
quick=0
args=()
for a in "$@"; do
    case "$a" in
    --slow) slow=always ;;
    --quick) quick=1 ;;
    *) args+=("$a") ;;
    esac
done
set -- "${args[@]+"${args[@]}"}"

# The quick lane's integration-test binaries: those a full run showed finishing in about 5 s
# or less each on 2 cores (cargo test prints "finished in Ns" per binary; measure again with
# `cargo test --workspace --test NAME` when adding one). Together with the unit tests they
# take about 75 s on an idle 2-core machine. Anything slower (ZooKeeper sessions expiring,
# browsers, timer windows) stays in the full run.
quick_tests=(
    # grpc-dynamic
    json_conformance
)
# The gateway's integration tests are one binary, `it` (gateway/tests/it/main.rs), one module
# per area: the quick lane runs these modules of it (the same measure, per module: `cargo test
# -p portico-gateway --test it -- NAME::` prints "finished in Ns"), and skips every other
# module that gateway/tests/it/main.rs declares.
quick_gateway=(layers grpc_invoke smuggling hardening edge connections publish slowloris invoke)
# The registry's, the control crate's and the demo backend's likewise (registry/tests/it,
# control/tests/it, demo/tests/it): these modules of each, the rest skipped.
quick_registry=(layers prometheus_rules zk_lockdown input_limits publish_unchanged admin_auth
    registry_killed write_checks reports first_run)
quick_control=(layers prop_sign prop_snapshot prop_template)
quick_demo=(demo_backend example_config)

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
# redis-server: the shared counters and nonces of gateway/tests/it/cluster.rs (a fleet of
# gateways; portico_testkit::Redis starts it on a free port).
ensure_packages redis-server
# prometheus: promtool checks ops/prometheus/*.yml and gateway/tests/it/dashboards.rs runs every
# panel query of ops/grafana/portico-fleet.json on a real Prometheus scraping a gateway.
ensure_packages prometheus
# iproute2: `ip netns` for gateway/tests/it/netns.rs (ZooKeeper servers and gateways on
# namespaced hosts joined by veth pairs; the test needs root).
ensure_packages iproute2
# --- browser tests (console e2e): Debian's Chromium, and the console's npm toolchain ------
# registry/tests/it/console_e2e.rs drives /usr/bin/chromium with playwright-core (no browser
# download) and fails, saying why, when Chromium or admin-ui/node_modules is missing.
ensure_packages chromium chromium-driver fonts-liberation
command -v npm >/dev/null 2>&1 || ensure_packages nodejs npm
# --- admin API fuzzing: schemathesis (PyPI, pinned in ops/lib.sh) in .run/venv --------------
# registry/tests/it/schemathesis.rs runs it against the registry's OpenAPI document and fails,
# saying how to install it, when it is missing.
if st="$(ensure_schemathesis)"; then
    export PORTICO_SCHEMATHESIS="$st"
else
    warn "schemathesis could not be installed: registry/tests/it/schemathesis.rs will fail"
fi
# --- the developer portal's OpenAPI documents: openapi-spec-validator (PyPI, pinned) ------
# registry/tests/it/portal.rs validates them with it and fails, saying how to install it; its
# curl snippet signs with openssl.
ensure_packages openssl
if py="$(ensure_openapi_validator)"; then
    export PORTICO_OPENAPI_PYTHON="$py"
else
    warn "openapi-spec-validator could not be installed: registry/tests/it/portal.rs will fail"
fi
# --- real gRPC servers behind generic invocation: grpcio + protobuf (PyPI, pinned) --------
# gateway/tests/it/grpc_interop.rs starts gateway/tests/grpcio_server.py with this interpreter
# and fails, saying how to install them, when they are missing.
if py="$(ensure_grpcio)"; then
    export PORTICO_GRPCIO_PYTHON="$py"
else
    warn "grpcio could not be installed: gateway/tests/it/grpc_interop.rs will fail"
fi
# ... and a Node @grpc/grpc-js server (npm, pinned by gateway/tests/grpcjs/package-lock.json):
# grpc_interop.rs runs gateway/tests/grpcjs_server.js with node and fails, saying how to
# install it, when it is missing.
if dir="$(ensure_grpcjs)"; then
    export PORTICO_GRPCJS_DIR="$dir"
else
    warn "@grpc/grpc-js could not be installed: gateway/tests/it/grpc_interop.rs will fail"
fi
# ... and a grpc-java server (Debian's OpenJDK, libgrpc-java, Netty: ensure_grpcjava compiles
# gateway/tests/grpcjava/InteropServer.java when it changed): grpc_interop.rs runs the
# launcher it prints and fails, saying how to install it, when it is missing.
if run="$(ensure_grpcjava)"; then
    export PORTICO_GRPCJAVA_RUN="$run"
else
    warn "the grpc-java interop server could not be built: gateway/tests/it/grpc_interop.rs will fail"
fi
# ------------------------------------------------------------------------------------------
export PORTICO_ZK_BIN="$ZK_BIN"

# --- the slow lane ---------------------------------------------------------------------------
# The tests of gateway/tests/it/grpc_interop.rs marked #[ignore = "slow lane: ..."] mostly wait
# (a 3-minute call, 6 minutes idle, a backend restarted under load), so they run in the
# background beside the main cargo test. They guard the gRPC client, so they run at least
# once per change to gateway/src/invoke: ops/slow-lane.stamp holds the git tree id of
# gateway/src/invoke they last passed on, and a run whose tree differs (or outside a git
# checkout) runs them; --slow always does. A pass writes the stamp; commit it with the change.
slow_stamp="$ROOT/ops/slow-lane.stamp"
slow_cmd=(cargo test -p portico-gateway --test it --no-fail-fast -- grpc_interop:: --ignored --test-threads 8)

# invoke_tree: the tree id gateway/src/invoke would have if committed as it is now
# (uncommitted edits included), from a throw-away index: the real index is not touched.
invoke_tree() {
    local tmp rc=0
    git -C "$ROOT" rev-parse --verify -q HEAD:gateway/src/invoke >/dev/null 2>&1 || return 1
    tmp="$(mktemp -d)"
    GIT_INDEX_FILE="$tmp/index" git -C "$ROOT" read-tree HEAD &&
        GIT_INDEX_FILE="$tmp/index" git -C "$ROOT" add -A -- gateway/src/invoke &&
        GIT_INDEX_FILE="$tmp/index" git -C "$ROOT" write-tree --prefix=gateway/src/invoke/ || rc=1
    rm -rf "$tmp"
    return "$rc"
}

slow_tree="$(invoke_tree 2>/dev/null || true)"
slow_last="$(grep -v '^#' "$slow_stamp" 2>/dev/null | head -n 1 || true)"
slow_why=""
if [ "$quick" = 1 ] && [ "$slow" != always ]; then
    slow=skip
    slow_why="--quick: ./ops/test.sh --slow runs it"
elif [ "$slow" = always ]; then
    slow_why="--slow"
elif [ "$#" -ne 0 ]; then
    slow=skip
    slow_why="a partial run (cargo test args given): ./ops/test.sh --slow runs it"
elif [ -z "$slow_tree" ]; then
    slow_why="not a git checkout: the tree of gateway/src/invoke is unknown"
elif [ "$slow_tree" != "$slow_last" ]; then
    slow_why="gateway/src/invoke ($slow_tree) changed since it last passed (${slow_last:-never})"
else
    slow=skip
    slow_why="gateway/src/invoke unchanged since it last passed (ops/slow-lane.stamp)"
fi
slow_pid="" slow_t0=0

# slow_lane_start: starts it in the background, output to $logdir/slow-lane.log.
slow_lane_start() {
    [ "$slow" = skip ] && return 0
    log "slow-lane (background, log $logdir/slow-lane.log; $slow_why): ${slow_cmd[*]}"
    rm -f "$logdir/slow-lane.rc"
    slow_t0=$SECONDS
    ("${slow_cmd[@]}" >"$logdir/slow-lane.log" 2>&1; echo "$?" >"$logdir/slow-lane.rc") &
    slow_pid=$!
}

# slow_lane_join: waits for it and records it as a step (or records why it did not run).
slow_lane_join() {
    local rc waited=$SECONDS
    step_names+=("slow-lane")
    if [ "$slow" = skip ]; then
        step_results+=("skipped ($slow_why)")
        return 0
    fi
    if [ -z "$slow_pid" ]; then
        step_results+=("not run (the build failed)")
        failed=1
        return 0
    fi
    log "slow-lane: waiting for it to finish"
    wait "$slow_pid" || true
    rc="$(cat "$logdir/slow-lane.rc" 2>/dev/null || echo 1)"
    grep -a -E '^test .* \.\.\. (ok|FAILED)$|^(Grpcio|GrpcJs|GrpcJava): ' "$logdir/slow-lane.log" >&2 || true
    if [ "$rc" -eq 0 ]; then
        step_results+=("ok      $((SECONDS - slow_t0))s (in the background; $((SECONDS - waited))s waited for)")
        if [ -n "$slow_tree" ]; then
            printf '# git rev-parse HEAD:gateway/src/invoke of the tree the slow lane last passed on\n# (./ops/test.sh writes it after a pass: commit it with the change)\n%s\n' \
                "$slow_tree" >"$slow_stamp"
            [ "$slow_tree" = "$slow_last" ] || log "slow-lane passed: ops/slow-lane.stamp updated, commit it"
        fi
    else
        step_results+=("FAILED  $((SECONDS - slow_t0))s (exit $rc, log $logdir/slow-lane.log)")
        failed=1
    fi
}

# --- the quick lane (--quick) ----------------------------------------------------------------
# quick_cargo_tests ARGS...: the quick lane's cargo test runs (the workspace's unit tests and
# $quick_tests with ARGS; the gateway's `it` with $gateway_args; the registry's, control's and
# demo's `it`, with quick_it); fails if any fails.
quick_cargo_tests() {
    local rc=0
    cargo test --no-fail-fast "${quick_args[@]}" "$@" || rc=$?
    cargo test --no-fail-fast "${gateway_args[@]}" || rc=$?
    quick_it portico-registry registry/tests/it "${quick_registry[@]}" || rc=$?
    quick_it portico-control control/tests/it "${quick_control[@]}" || rc=$?
    quick_it portico-demo demo/tests/it "${quick_demo[@]}" || rc=$?
    return "$rc"
}

# quick_it CRATE DIR MODULE...: cargo test of CRATE's integration-test binary `it`
# (DIR/main.rs) with the quick lane's extra arguments ($quick_extra), every test module that
# DIR/main.rs declares skipped (libtest's --skip) but MODULE... (a helper module, a directory
# with its mod.rs, holds no tests).
quick_it() {
    local crate="$1" dir="$2" m
    shift 2
    local args=(-p "$crate" --test it "${quick_extra[@]}")
    case " ${quick_extra[*]} " in *" -- "*) ;; *) args+=(--) ;; esac
    for m in $(sed -n 's/^mod \([a-z0-9_]*\);$/\1/p' "$dir/main.rs"); do
        [ -d "$dir/$m" ] && continue
        case " $* " in *" $m "*) ;; *) args+=(--skip "$m::") ;; esac
    done
    cargo test --no-fail-fast "${args[@]}"
}

if [ "$quick" = 1 ]; then
    if step build cargo build --workspace --bins; then
        quick_args=(--workspace --lib --bins)
        for t in "${quick_tests[@]}"; do quick_args+=(--test "$t"); done
        # The gateway's `it`: every module but those of $quick_gateway skipped (libtest's
        # --skip, so that a test-name filter given narrows it as it narrows the rest).
        gateway_args=(-p portico-gateway --test it "$@")
        case " $* " in *" -- "*) ;; *) gateway_args+=(--) ;; esac
        for m in $(sed -n 's/^mod \([a-z0-9_]*\);$/\1/p' gateway/tests/it/main.rs); do
            case " ${quick_gateway[*]} support " in
            *" $m "*) ;;
            *) gateway_args+=(--skip "$m::") ;;
            esac
        done
        quick_extra=("$@")
        step test quick_cargo_tests "$@" || true
    else
        warn "build failed: tests not run"
    fi
else
    # --- 2..7 (the full run) ------------------------------------------------------------
    step sign-vectors python3 ops/sign.py --self-test || true
    # The console: npm ci (only when node_modules is not the lock file's) and the build.
    step console admin-ui/build.sh || true
    step protocol-doc python3 ops/check_docs.py || true
    if [ "${PORTICO_SKIP_LINT:-0}" != 1 ]; then
        step fmt cargo fmt --all -- --check || true
    fi
    if step build cargo build --workspace --all-targets; then
        slow_lane_start
        if [ "$#" -eq 0 ]; then
            step test cargo test --workspace --no-fail-fast || true
            # The README's "What to try next", command by command, on a fresh ./ops/up.sh.
            step quickstart python3 ops/check_quickstart.py --profile debug || true
        else
            # A virtual workspace tests every member unless -p narrows it.
            step test cargo test --no-fail-fast "$@" || true
        fi
    else
        warn "build failed: tests not run"
    fi
    # Fuzzing smoke run (each target a short while; long runs: ./ops/fuzz.sh all SECONDS).
    if [ "${PORTICO_FUZZ_SECONDS:-10}" != 0 ]; then
        step fuzz ./ops/fuzz.sh all "${PORTICO_FUZZ_SECONDS:-10}" || true
    fi
    if [ "${PORTICO_SKIP_LINT:-0}" != 1 ]; then
        step clippy cargo clippy --workspace --all-targets -- -D warnings || true
    fi
fi

slow_lane_join

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
if [ "$slow" != skip ] && [ -f "$logdir/slow-lane.log" ] &&
    grep -q -a -E '^test .* \.\.\. FAILED$' "$logdir/slow-lane.log"; then
    echo "  failing slow-lane tests (log $logdir/slow-lane.log):"
    grep -a -E '^test .* \.\.\. FAILED$' "$logdir/slow-lane.log" | sed 's/^test /    /; s/ \.\.\. FAILED$//' |
        while read -r name; do
            echo "    $name"
            grep -a -A5 -F "thread '$name' " "$logdir/slow-lane.log" |
                awk '/^(stack backtrace:|note: run with|--$)/ { exit } { print }' | sed 's/^/      /'
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
