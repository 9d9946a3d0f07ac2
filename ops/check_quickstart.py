#!/usr/bin/env python3
"""Runs every command of README.md's "What to try next" against a fresh ./ops/up.sh and checks
each answer, so the README cannot drift from what a newcomer gets.

    python3 ops/check_quickstart.py [--profile debug|release] [--keep]

It starts the stack with ./ops/up.sh (the binaries must be built: it passes --no-build) in a
new temporary run directory (PORTICO_RUN_DIR) on free ports only (PORTICO_ANY_PORT=1), reads
the addresses from that run's env file, and runs the README's shell blocks between "## What to
try next" and "## Layout" one command at a time, in order, with the README's fixed addresses
(127.0.0.1:8080, :8081, :9180, :9181, :9000), `.run/` and `./target/release/` replaced by this
run's. `. .run/env` changes the environment of the commands after it, as in a shell. A command
ending in `&` runs in the background; what it must print is checked after the next command.

Every README command must match exactly one entry of EXPECTED below (a command nobody checks
fails the run), and each entry says what the command must exit with and print; some also probe
the gateway afterwards (a switch turned on must make the API answer 503 API_DEGRADED).
Exit status 0 when every command answered as expected; 1 with a list of what did not.
Used by ./ops/test.sh.
"""

import argparse
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (pattern the command matches, exit status, patterns its output must contain, probe or None).
# Patterns are regular expressions searched in the command's stdout + stderr.
EXPECTED = [
    (r"^curl -s \S+/v1/health$", 0, [r'"status":\s*"ok"'], None),
    (r"sign\.py --key merchant-1 --secret s3cr3t-value GET \S+/v1/orders/42$", 0,
     [r"HTTP 200", r'"order_id":\s*"42"'], None),
    (r"sign\.py --key merchant-1 --secret s3cr3t-value --body '\{\"item\":\"book\",\"qty\":2\}' POST \S+/v1/orders$",
     0, [r"HTTP 200", r'"created"'], None),
    (r"sign\.py .*--curl GET \S+/v1/orders/42$", 0,
     [r"^curl ", r"X-Portico-Signature: [0-9a-f]{64}", r"http://127\.0\.0\.1:\d+/v1/orders/42"],
     "curl_line"),
    (r"--secret s3cr3t-value-sandbox GET \S+/v1/orders/42$", 0, [r"HTTP 200"], None),
    (r"^curl -s \S+/grpc/v1/orders/42$", 0, [r'"orderId":\s*"42"', r'"status":\s*"ORDER_STATUS_PAID"'], None),
    (r"router\?method=grpc\.order\.get", 0, [r'"orderId":\s*"42"'], None),
    (r"POST '\S+/router\?method=order\.create'$", 0, [r"HTTP 200", r'"created"'], None),
    (r"^curl -s http://[\d.]+:\d+/v1/orders/42$", 0, [r'"code":\s*"SIGNATURE_MISSING"', r'"request_id"'], None),
    (r"--key merchant-2 .* POST \S+/v1/orders$", 1, [r"HTTP 403", r'"code":\s*"APP_FORBIDDEN"'], None),
    (r"^curl -si \S+/v1/promotions$", 0, [r"x-degraded: 1", r'"degraded":\s*true'], None),
    (r"^curl -s \S+/status$", 0, [r'"ready":\s*true', r'"config_source"'], None),
    (r"^curl -s \S+/metrics \| grep '\^portico_'$", 0, [r"^portico_requests_total\{", r"^portico_apis_loaded"], None),
    (r"^\. \S+/env\b", 0, [], None),
    (r"portico switch order\.get on ", 0, [r"ON: degraded"], "degraded"),
    (r"portico switch order\.get off ", 0, [r"OFF"], "restored"),
    (r"portico status\b", 0, [r"ZooKeeper connected", r"\bIN SYNC\b", r"\byes\b"], None),
    (r"notify_client\.py .*&$", None, [r'"order_id":\s*"42"', r'"status":\s*"paid"'], None),
    (r"portico notify .*--topic orders", 0, [r"^merchant-1\s+\d+-\d+$"], None),
]


def log(msg):
    print(f"==> quick start: {msg}", file=sys.stderr, flush=True)


def readme_commands(readme):
    """The commands of the sh blocks between "## What to try next" and "## Layout"."""
    text = open(readme, encoding="utf-8").read()
    start = text.index("## What to try next")
    end = text.index("## Layout", start)
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text[start:end], re.S):
        pending = ""
        for line in block.splitlines():
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if stripped.endswith("\\"):
                pending += stripped[:-1].rstrip() + " "
                continue
            command = (pending + stripped).strip()
            pending = ""
            # A trailing comment is the reader's note, not part of the command.
            command = re.sub(r"\s+#\s[^'\"]*$", "", command)
            commands.append(command)
    return commands


def load_env(path):
    env = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^(?:export\s+)?([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            env[m.group(1)] = m.group(2)
    return env


def localise(command, run_env, run_dir, profile):
    """The README command with this run's addresses, run directory and build profile."""
    ports = {
        "8080": run_env["PORTICO_GATEWAY"],
        "8081": run_env["PORTICO_SANDBOX"],
        "9180": run_env["PORTICO_ADMIN"],
        "9181": run_env["PORTICO_INTERNAL"],
        "9000": run_env["PORTICO_REGISTRY"],
    }
    out = re.sub(r"http://127\.0\.0\.1:(8080|8081|9180|9181|9000)\b",
                 lambda m: ports[m.group(1)], command)
    out = out.replace("./target/release/", f"./target/{profile}/")
    out = re.sub(r"(?<![\w/])\.run/", run_dir.rstrip("/") + "/", out)
    return out


def signed_status(url, key, secret, method="GET", body=b""):
    """(status, body) of a call signed as docs/PROTOCOL.md "Signing a request" says."""
    parsed = urllib.parse.urlsplit(url)
    ts = str(int(time.time() * 1000))
    nonce = secrets.token_hex(8)
    sts = "\n".join([method, parsed.path, "", key, ts, nonce, hashlib.sha256(body).hexdigest()])
    sig = hmac.new(secret.encode(), sts.encode(), hashlib.sha256).hexdigest()
    req = urllib.request.Request(url, data=body or None, method=method, headers={
        "X-Portico-AppKey": key, "X-Portico-Timestamp": ts,
        "X-Portico-Nonce": nonce, "X-Portico-Signature": sig})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def probe(kind, run_env, output):
    """Checks that a command had its effect; returns a problem or None."""
    gateway = run_env["PORTICO_GATEWAY"]
    if kind == "curl_line":
        curl = output.strip().splitlines()[0]
        done = subprocess.run(curl, shell=True, capture_output=True, text=True, timeout=20)
        if "HTTP/1.1 200" not in done.stdout:
            return f"the printed curl command did not answer 200: {done.stdout[:300]}{done.stderr[:300]}"
        return None
    want = 503 if kind == "degraded" else 200
    deadline = time.time() + 5
    while True:
        status, body = signed_status(f"{gateway}/v1/orders/42", "merchant-1", "s3cr3t-value")
        ok = status == want and (want != 503 or '"API_DEGRADED"' in body)
        if ok:
            return None
        if time.time() > deadline:
            return f"order.get answered {status} {body[:200]} (wanted {want})"
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default=os.environ.get("PORTICO_PROFILE", "debug"))
    ap.add_argument("--keep", action="store_true", help="leave the stack running and its run directory")
    args = ap.parse_args()

    run_dir = tempfile.mkdtemp(prefix="portico-quickstart-")
    up_env = dict(os.environ, PORTICO_RUN_DIR=run_dir, PORTICO_ANY_PORT="1", PORTICO_PROFILE=args.profile)
    log(f"./ops/up.sh --no-build ({args.profile} build) in {run_dir}")
    started = time.time()
    up = subprocess.run([os.path.join(ROOT, "ops/up.sh"), "--no-build"], cwd=ROOT, env=up_env,
                        capture_output=True, text=True)
    problems = []
    background = []
    try:
        if up.returncode != 0:
            print(up.stdout[-3000:], up.stderr[-3000:], file=sys.stderr)
            problems.append(f"./ops/up.sh exited {up.returncode}")
            return report(problems)
        log(f"up in {time.time() - started:.1f} s")
        run_env = load_env(os.path.join(run_dir, "env"))
        shell_env = dict(os.environ)
        # The README's commands as a newcomer types them: nothing of this process's PORTICO_*.
        for name in list(shell_env):
            if name.startswith("PORTICO_"):
                del shell_env[name]
        commands = readme_commands(os.path.join(ROOT, "README.md"))
        if len(commands) < 10:
            problems.append(f"only {len(commands)} commands found in README.md's 'What to try next'")
        waiting = None  # (command, patterns, process, output file) of a background command
        for readme_cmd in commands:
            matches = [e for e in EXPECTED if re.search(e[0], readme_cmd)]
            if len(matches) != 1:
                problems.append(f"{readme_cmd!r}: {len(matches)} entries of EXPECTED match "
                                "(ops/check_quickstart.py must say what each README command answers)")
                continue
            _, want_rc, patterns, probe_kind = matches[0]
            command = localise(readme_cmd, run_env, run_dir, args.profile)
            if command.endswith("&"):
                out = tempfile.TemporaryFile(mode="w+")
                proc = subprocess.Popen(["bash", "-c", command[:-1]], cwd=ROOT, env=shell_env,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                background.append(proc)
                waiting = (readme_cmd, patterns, proc, out)
                time.sleep(1.5)  # the stream is held before anything is published
                log(f"started in the background: {command}")
                continue
            if re.match(r"^\.\s", command):
                dump = subprocess.run(["bash", "-c", f"{command} && env -0"], cwd=ROOT, env=shell_env,
                                      capture_output=True, text=True, timeout=20)
                if dump.returncode != 0:
                    problems.append(f"{readme_cmd!r} failed: {dump.stderr.strip()}")
                    continue
                shell_env = dict(kv.split("=", 1) for kv in dump.stdout.split("\0") if "=" in kv)
                log(f"ok: {readme_cmd}")
                continue
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=shell_env,
                                  capture_output=True, text=True, timeout=60)
            output = done.stdout + done.stderr
            wrong = []
            if want_rc is not None and done.returncode != want_rc:
                wrong.append(f"exit {done.returncode} (wanted {want_rc})")
            wrong += [f"no /{p}/ in the output" for p in patterns if not re.search(p, output, re.M)]
            if not wrong and probe_kind:
                problem = probe(probe_kind, run_env, output)
                if problem:
                    wrong.append(problem)
            if wrong:
                problems.append(f"{readme_cmd!r} (run as {command!r}): {'; '.join(wrong)}\n"
                                f"    output: {output.strip()[:600]}")
            else:
                log(f"ok: {readme_cmd}")
            if waiting:
                b_cmd, b_patterns, b_proc, b_out = waiting
                deadline = time.time() + 10
                while True:
                    b_out.seek(0)
                    text = b_out.read()
                    missing = [p for p in b_patterns if not re.search(p, text, re.M)]
                    if not missing or time.time() > deadline:
                        break
                    time.sleep(0.2)
                if missing:
                    problems.append(f"{b_cmd!r} (background) printed no {missing}: {text.strip()[:600]}")
                else:
                    log(f"ok: {b_cmd}")
                waiting = None
        if waiting:
            problems.append(f"{waiting[0]!r} ran in the background but no command followed it")
        log(f"{len(commands)} README commands in {time.time() - started:.1f} s")
    finally:
        for proc in background:
            try:
                os.killpg(proc.pid, 15)
            except ProcessLookupError:
                pass
        if not args.keep:
            subprocess.run([os.path.join(ROOT, "ops/down.sh")], cwd=ROOT, env=up_env,
                           capture_output=True, text=True)
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            log(f"kept: {run_dir} (stop with PORTICO_RUN_DIR={run_dir} ./ops/down.sh)")
    return report(problems)


def report(problems):
    if problems:
        print("README quick start: FAILED", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print("README quick start: every command answered as the README says", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
