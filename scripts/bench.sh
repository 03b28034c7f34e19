#!/usr/bin/env bash
# Load benchmark of the release binary on this machine (loopback only, bounded in time).
#
#   scripts/bench.sh [seconds-per-scenario (default 10)] [connections (default 32)]
#
# Builds `aigw` in release mode, starts it on a free port with a fresh SQLite database in a
# temporary folder, registers a user, creates an API key, then measures with wrk:
#   1. GET  /api/v1/auth/me              (JWT access token: signature + revocation set + 1 read)
#   2. GET  /api/v1/auth/api-keys        (API key with read: checksum + digest lookup + list)
#   3. POST /api/v1/ai/chat/completions  (API key, built-in echo model, no upstream)
#   4. POST /api/v1/auth/login           (argon2id m=19456 KiB t=2 p=1: CPU bound by design)
# and reports the server's peak resident memory (VmHWM). Needs wrk (Debian: apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
conns=${2:-32}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 1; }

# shellcheck source=lib/serve.sh
. scripts/lib/serve.sh
trap serve_stop EXIT
serve_start '["ai_gateway","read"]'

lua="$work/post.lua"
run() { # name, extra wrk args...
  local name=$1; shift
  echo "== $name"
  wrk -t2 -c"$conns" -d"${secs}s" --latency "$@" | grep -E 'Requests/sec|Latency +[0-9]|^ +(50|99)%|Non-2xx|Socket errors'
  echo "   server: $(grep -E 'VmRSS' "/proc/$pid/status" | tr -s ' \t' ' '), threads $(grep Threads "/proc/$pid/status" | cut -f2)"
}
run "GET /auth/me (access token)" -H "authorization: Bearer $token" "$base/api/v1/auth/me"
run "GET /auth/api-keys (API key)" -H "authorization: $key" "$base/api/v1/auth/api-keys"
cat > "$lua" <<'LUA'
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '{"model":"echo","messages":[{"role":"user","content":"hello from the benchmark"}]}'
LUA
run "POST /ai/chat/completions (echo, API key)" -H "authorization: $key" -s "$lua" "$base/api/v1/ai/chat/completions"
cat > "$lua" <<'LUA'
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '{"email":"script@example.com","password":"a long script passphrase"}'
LUA
run "POST /auth/login (argon2id)" -s "$lua" "$base/api/v1/auth/login"
echo "== server memory"
grep -E 'VmHWM|VmRSS' "/proc/$pid/status"
