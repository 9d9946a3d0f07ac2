#!/usr/bin/env bash
# The fleet's TLS session ticket keys (docs/operations/gateway.md, "TLS"): the file every
# gateway of a fleet reads with --tls-ticket-keys, so a merchant resumes its TLS session on
# whichever gateway it reaches. One key per line (64 hex digits); the first seals new
# tickets, every key opens them. Gateways re-read the file within a few seconds of a change.
#
#   ./ops/tls-ticket-keys.sh new FILE      a file with one fresh key (refuses to overwrite)
#   ./ops/tls-ticket-keys.sh rotate FILE   a fresh key first, the previous sealing key kept
#                                          to open the tickets it sealed, older keys erased
#   ./ops/tls-ticket-keys.sh ensure FILE   `new` when FILE is missing, else nothing
#
# Rotate on a schedule (daily is the docs' advice: tickets then live at most two days, and a
# key read from the file cannot open older ones) and copy the same file to every gateway
# before the next rotation. Whoever can read the file can open the tickets sealed with its
# keys: it is written mode 0600, aside and renamed, so a gateway never reads half a file.
set -euo pipefail

die() { echo "tls-ticket-keys: $*" >&2; exit 1; }

fresh_key() {
    # 32 bytes from the kernel's CSPRNG, as 64 hex digits.
    od -An -tx1 -N32 /dev/urandom | tr -d ' \n'
}

write_keys() {
    local file="$1"
    shift
    local dir tmp
    dir="$(dirname "$file")"
    mkdir -p "$dir"
    tmp="$(mktemp "$dir/.ticket-keys.XXXXXX")"
    chmod 600 "$tmp"
    {
        echo "# Portico TLS ticket keys, written $(date -u +%Y-%m-%dT%H:%M:%SZ): the first seals, all open."
        printf '%s\n' "$@"
    } >"$tmp"
    mv -f "$tmp" "$file"
}

keys_in() {
    grep -Ev '^[[:space:]]*(#|$)' "$1" || true
}

[ $# -eq 2 ] || die "usage: $0 new|rotate|ensure FILE"
cmd="$1" file="$2"
case "$cmd" in
new)
    [ -e "$file" ] && die "$file exists: use rotate"
    write_keys "$file" "$(fresh_key)"
    echo "tls-ticket-keys: wrote $file (1 key)"
    ;;
ensure)
    [ -s "$file" ] && exit 0
    write_keys "$file" "$(fresh_key)"
    echo "tls-ticket-keys: wrote $file (1 key)"
    ;;
rotate)
    [ -f "$file" ] || die "$file does not exist: use new"
    current="$(keys_in "$file" | head -n 1)"
    [[ "$current" =~ ^[0-9a-fA-F]{64}$ ]] || die "$file has no valid first key; fix it or start again with new"
    write_keys "$file" "$(fresh_key)" "$current"
    echo "tls-ticket-keys: rotated $file (a fresh sealing key; the previous one still opens its tickets)"
    ;;
*) die "usage: $0 new|rotate|ensure FILE" ;;
esac
