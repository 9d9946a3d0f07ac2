#!/usr/bin/env bash
# Builds the console into admin-ui/dist (served by portico-registry at /) and the merchants'
# developer portal into admin-ui/dist/portal (served at /portal/). Idempotent and
# quick when nothing changed:
#   - `npm ci` only when node_modules does not match package-lock.json (a hash of the lock
#     file is kept in node_modules/.portico-lock.sha256 after a successful install);
#   - `npm run build` (type check + vite) only when a source is newer than dist/index.html.
# Used by ops/up.sh and ops/test.sh.   ./admin-ui/build.sh [--force]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
force=0
[ "${1:-}" = --force ] && force=1

command -v npm >/dev/null 2>&1 || {
    echo "error: npm is not installed (Node.js 20 with npm is needed to build the console)" >&2
    exit 1
}
stamp=node_modules/.portico-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ "$force" = 1 ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "==> admin-ui: npm ci" >&2
    npm ci --no-audit --no-fund --loglevel=error
    echo "$want" >"$stamp"
else
    echo "==> admin-ui: node_modules up to date with package-lock.json" >&2
fi

# The console's document types are generated (docs/operations/registry.md, "The admin API's schemas"):
# src/generated/api.d.ts must be what openapi-typescript makes of src/generated/openapi.json
# (the registry's OpenAPI document, itself checked by the registry's
# `the_consoles_copy_of_the_document_is_current` test). A drift fails the build.
echo "==> admin-ui: generated types match src/generated/openapi.json" >&2
checked_in="$(mktemp --suffix=.d.ts)"
trap 'rm -f "$checked_in"' EXIT
cp -p src/generated/api.d.ts "$checked_in"
npm run --silent gen:api >/dev/null 2>&1 || npm run gen:api >&2
if ! cmp -s "$checked_in" src/generated/api.d.ts; then
    diff -u "$checked_in" src/generated/api.d.ts | head -40 >&2 || true
    cp -p "$checked_in" src/generated/api.d.ts
    echo "error: admin-ui/src/generated/api.d.ts is stale: run \`cd admin-ui && npm run gen:api\` and commit it" >&2
    exit 1
fi
cp -p "$checked_in" src/generated/api.d.ts # the same bytes, and its time: no rebuild for it

if [ "$force" = 1 ] || [ ! -f dist/index.html ] ||
    [ -n "$(find src portal public index.html vite.config.ts tsconfig.json package-lock.json -newer dist/index.html -print -quit 2>/dev/null)" ]; then
    echo "==> admin-ui: npm run build" >&2
    npm run build --silent
else
    echo "==> admin-ui: dist/ is up to date" >&2
fi
