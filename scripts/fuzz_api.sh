#!/usr/bin/env bash
# Property-based fuzzing of the HTTP API from its own OpenAPI description (schemathesis), to
# find 5xx answers, crashes and answers that break the documented schema.
#
#   scripts/fuzz_api.sh [max-examples per operation (default 25)]
#   AIGW_BIN=target/debug/aigw scripts/fuzz_api.sh   # use an already built binary
#
# Installs schemathesis into .venv-fuzz (PyPI), starts the binary (release, built here, unless
# AIGW_BIN names one) on a free port with a fresh SQLite database (rate limits off), registers
# a user, then runs every check (`--checks all`) in every phase (examples, coverage, fuzzing,
# stateful) once with an access token and once with an API key. Loopback only; stops by
# itself; about two minutes with the default number of examples. `scripts/test.sh` runs it, so
# CI does. When PyPI cannot be reached the run is skipped with a notice (exit 0).
#
# Deliberate exceptions, each with its reason, are in scripts/fuzz_api.toml (rule-based 400s
# the schema cannot state, the draft's 422 for a reused Idempotency-Key). Logout and
# `DELETE /auth/sessions/{id}` are excluded because they end the very session the run
# authenticates with. The user is made an admin (`aigw admin set-role`, as an operator
# would), so the administrative endpoints are fuzzed past their 403.
set -euo pipefail
cd "$(dirname "$0")/.."
examples=${1:-25}
# CPython 3.11 breaks inside hypothesis ("AST constructor recursion depth mismatch", a CPython
# bug fixed in later versions): prefer a newer interpreter when there is one.
python=python3
for candidate in python3.13 python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
  if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
# A venv made by an older interpreter is replaced.
if [ -x .venv-fuzz/bin/python ] && ! .venv-fuzz/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null \
  && [ "$python" != python3 ]; then
  rm -rf .venv-fuzz
fi
if ! "$python" -m venv .venv-fuzz >/dev/null 2>&1 || ! .venv-fuzz/bin/pip install -q schemathesis >/dev/null 2>&1; then
  echo "[fuzz_api] SKIPPED: could not install schemathesis from PyPI" >&2
  exit 0
fi
# shellcheck source=lib/serve.sh
. scripts/lib/serve.sh
trap serve_stop EXIT
# The key cannot revoke or delete itself (no `write`), and goes first: the access-token pass
# may delete it (the stateful phase deletes the keys it lists).
# GitHub's secret-scanning endpoint answers 404 until it is configured: give it a keys
# document with a fresh P-256 key (nothing the fuzzer sends is signed by it).
keys_doc=$(mktemp)
if command -v openssl >/dev/null 2>&1; then
  openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl ec -pubout 2>/dev/null |
    python3 -c 'import json,sys; print(json.dumps({"public_keys": [{"key_identifier": "fuzz", "key": sys.stdin.read(), "is_current": True}]}))' >"$keys_doc"
  export AIGW__SECRET_SCANNING__ENABLED=true AIGW__SECRET_SCANNING__GITHUB_KEYS_FILE="$keys_doc"
  exclude_scanning=()
else
  echo "[fuzz_api] openssl not found: /api/v1/secret-scanning/github is left out" >&2
  exclude_scanning=(--exclude-path /api/v1/secret-scanning/github)
fi
serve_start '["ai_gateway","read"]'
bin=${AIGW_BIN:-target/release/aigw}
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
(cd "$work" && AIGW__LOG__LEVEL=warn "$bin" admin set-role --email script@example.com --role admin >/dev/null)
status=0
for credential in "$key" "Bearer $token"; do
  .venv-fuzz/bin/st --config-file scripts/fuzz_api.toml run "$base/api/v1/openapi.json" \
    --url "$base" -H "Authorization: $credential" --checks all --max-examples "$examples" \
    --workers 2 --exclude-path /api/v1/auth/logout --exclude-path '/api/v1/auth/sessions/{id}' \
    "${exclude_scanning[@]}" || status=1
done
if grep -qiE 'panicked|internal error' "$work/server.log"; then
  echo "server log shows panics or internal errors:" >&2
  grep -iE 'panicked|internal error' "$work/server.log" >&2
  status=1
fi
rm -f "$keys_doc"
exit $status
