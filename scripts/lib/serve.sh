# Sourced by scripts/bench_usage.sh and scripts/fuzz_api.sh: starts the release binary (or $AIGW_BIN
# when set, e.g. the debug binary the tests just built) on a free loopback port with a fresh SQLite database in a temporary folder (rate limits off), waits
# until it answers, registers a user and creates an API key. Sets: work, pid, base, token, key.
# The caller's EXIT trap must call `serve_stop`.
# shellcheck shell=bash

serve_start() { # permissions JSON array for the API key, e.g. '["ai_gateway","read"]'
  local permissions=$1
  local bin=${AIGW_BIN:-}
  if [ -z "$bin" ]; then
    cargo build --profile dist --quiet
    bin=target/dist/aigw
  fi
  case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
  work=$(mktemp -d)
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  (cd "$work" && AIGW__SERVER__LISTEN="127.0.0.1:$port" AIGW__LOG__LEVEL=warn \
    AIGW__RATE_LIMIT__ENABLED=false exec "$bin" >"$work/server.log" 2>&1) &
  pid=$!
  base="http://127.0.0.1:$port"
  for _ in $(seq 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
  token=$(curl -sf "$base/api/v1/auth/register" -H 'content-type: application/json' \
    -d '{"email":"script@example.com","password":"a long script passphrase"}' | serve_json '["data"]["token"]')
  key=$(curl -sf "$base/api/v1/auth/api-keys" -H "authorization: Bearer $token" \
    -H 'content-type: application/json' -d "{\"name\":\"script\",\"permissions\":$permissions}" |
    serve_json '["data"]["key"]')
}

serve_json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

serve_stop() { # keeps the caller's exit status
  local status=$?
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$work"
  exit "$status"
}
