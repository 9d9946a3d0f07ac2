#!/usr/bin/env bash
# Calls {{API_ID}} ({{METHOD}} {{PATH}}) through a Portico gateway with curl, signed as the
# signing guide says (the developer portal's Signing page). Needs bash, curl and openssl.
#
#   PORTICO_APP_KEY=<app key> PORTICO_SECRET=<secret> bash call.sh
#
# PORTICO_BASE_URL overrides the gateway address. PORTICO_TIMESTAMP and PORTICO_NONCE fix the
# signed values, to compare with the guide's worked examples (leave them unset otherwise).
# Note: openssl gets the secret on its command line; on a shared host prefer another snippet.
set -euo pipefail
BASE_URL="${PORTICO_BASE_URL:-{{BASE_URL}}}"
APP_KEY="${PORTICO_APP_KEY:-{{APP_KEY}}}"
SECRET="${PORTICO_SECRET:-}"
METHOD='{{METHOD}}'
REQ_PATH='{{SH_PATH}}'  # the path, exactly as sent (percent-encoded)
QUERY='{{SH_QUERY}}'    # the raw query, as sent
# The canonical query of QUERY (the guide's six steps); recompute it when you change QUERY.
CANONICAL_QUERY='{{SH_CANONICAL_QUERY}}'
BODY='{{SH_BODY}}'      # the exact bytes sent and signed
SIGNED={{SH_SIGNED}}    # 0: a public API (auth none), no signature needed

args=(-sS -X "$METHOD" -w '\nHTTP %{http_code}\n')
if [ -n "$BODY" ]; then
    args+=(-H 'Content-Type: application/json' --data-binary "$BODY")
fi
if [ "$SIGNED" = 1 ]; then
    [ -n "$SECRET" ] || { echo "set PORTICO_SECRET (and PORTICO_APP_KEY) to your app's secret and key" >&2; exit 2; }
    ts="${PORTICO_TIMESTAMP:-$(($(date +%s) * 1000))}"
    nonce="${PORTICO_NONCE:-$(openssl rand -hex 12)}"
    body_sha="$(printf '%s' "$BODY" | openssl dgst -sha256 -r | cut -d' ' -f1)"
    string_to_sign="$(printf '%s\n%s\n%s\n%s\n%s\n%s\n%s' "$METHOD" "$REQ_PATH" "$CANONICAL_QUERY" \
        "$APP_KEY" "$ts" "$nonce" "$body_sha")"
    signature="$(printf '%s' "$string_to_sign" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)"
    args+=(-H "X-Portico-AppKey: $APP_KEY" -H "X-Portico-Timestamp: $ts"
        -H "X-Portico-Nonce: $nonce" -H "X-Portico-Signature: $signature")
fi
curl "${args[@]}" "${BASE_URL%/}$REQ_PATH${QUERY:+?$QUERY}"
