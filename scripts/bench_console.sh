#!/usr/bin/env bash
# The console under a big key table, and what its first load costs. A benchmark, not a test:
# it prints figures next to their targets.
#
#   scripts/bench_console.sh [keys (default 1000000)] [sqlite|postgres (default sqlite)]
#   AIGW_BIN=target/debug/aigw scripts/bench_console.sh 100000   # another binary
#
# Starts the release binary (scripts/lib/serve.sh) on a fresh SQLite file, or on a fresh
# PostgreSQL database of the server at $AIGW_BENCH_PG (default postgres://postgres@127.0.0.1:5432),
# dropped afterwards; gives the script's user N API keys with plain SQL (sqlite3 / psql), logs
# in through the console's form, and times 30 loads of its keys page, first and 1000th page
# (loopback, the whole HTTP round trip; target: 200 ms). Then sums what a browser transfers on
# a first visit (login page, stylesheet, script, gzip as served; target: 150 KB).
set -euo pipefail
cd "$(dirname "$0")/.."
keys=${1:-1000000}
backend=${2:-sqlite}
runs=30
for tool in curl python3 sqlite3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

pg_server=${AIGW_BENCH_PG:-postgres://postgres@127.0.0.1:5432}
pg_db=""
if [ "$backend" = postgres ]; then
  command -v psql >/dev/null || { echo "psql not found" >&2; exit 1; }
  pg_db="aigw_bench_console_$$"
  psql -q "$pg_server/postgres" -c "CREATE DATABASE $pg_db"
  export AIGW__DATABASE__URL="$pg_server/$pg_db"
fi

# shellcheck source=lib/serve.sh
. scripts/lib/serve.sh
cleanup() {
  local status=$?
  if [ -n "$pg_db" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    psql -q "$pg_server/postgres" -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" || true
  fi
  (exit "$status")
  serve_stop
}
trap cleanup EXIT
serve_start '["ai_gateway","read"]'

# Every bulk key copies the script's real key but for its id, name and digests. The ids
# (UUID-shaped, below any UUIDv7 of today) sort before the real key, so they page after it.
echo "== giving one user $keys API keys ($backend)"
started=$(date +%s)
columns="user_id, key_prefix, permissions, expires_at, created_at, revoked_at, last_used_at,
  allowed_models, max_budget_micros, budget_period, rpm_limit, tpm_limit, metadata,
  previous_key_hash, previous_key_expires_at, rotated_at, team_id, team_owned, budget_mode"
if [ "$backend" = postgres ]; then
  psql -q "$AIGW__DATABASE__URL" <<SQL
INSERT INTO api_keys (id, name, key_hash, $columns)
SELECT lpad(to_hex(n), 8, '0') || '-0000-7000-8000-' || lpad(to_hex(n), 12, '0'),
       'bulk key ' || n, 'bulk-digest-' || n, $columns
FROM generate_series(1, $keys) AS n, (SELECT * FROM api_keys LIMIT 1) AS k;
ANALYZE;
SQL
else
  sqlite3 "$work/data/aigw.db" >/dev/null <<SQL
PRAGMA busy_timeout = 10000;
BEGIN;
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < $keys)
INSERT INTO api_keys (id, name, key_hash, $columns)
SELECT printf('%08x-0000-7000-8000-%012x', n, n), 'bulk key ' || n, 'bulk-digest-' || n, $columns
FROM seq, (SELECT * FROM api_keys LIMIT 1);
COMMIT;
ANALYZE;
SQL
fi
echo "   loaded in $(( $(date +%s) - started )) s"

jar="$work/cookies"
status=$(curl -s -o /dev/null -w '%{http_code}' -c "$jar" "$base/login" \
  --data-urlencode email=script@example.com --data-urlencode 'password=a long script passphrase' \
  --data-urlencode next=/keys)
[ "$status" = 303 ] || { echo "console login answered $status" >&2; exit 1; }

time_page() { # name, path
  local name=$1 path=$2
  for _ in $(seq "$runs"); do
    curl -s -o /dev/null -b "$jar" -w '%{http_code} %{time_total}\n' "$base$path"
  done | python3 -c '
import sys
name = sys.argv[1]
rows = [l.split() for l in sys.stdin if l.strip()]
bad = [r[0] for r in rows if r[0] != "200"]
ms = sorted(float(r[1]) * 1000 for r in rows)
p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
verdict = "ok" if p(0.95) < 200 else "OVER 200 ms"
print(f"{name:<44} p50 {p(0.5):6.1f} ms  p95 {p(0.95):6.1f} ms  max {ms[-1]:6.1f} ms  {verdict}" + (f"  non-200: {bad}" if bad else ""))
' "$name"
}

deep=$(python3 -c "
import base64
n = max(1, $keys - 50 * 1000)
uid = f'{n:08x}-0000-7000-8000-{n:012x}'
print(base64.urlsafe_b64encode(f'id:{uid}'.encode()).decode().rstrip('='))")
echo "== the keys page, $runs loads each (target: 200 ms)"
time_page "GET /keys (first page of 50)" "/keys"
time_page "GET /keys?cursor=… (page 1001)" "/keys?cursor=$deep"

echo "== first visit: what a browser transfers (gzip as served; target: 150 KB)"
total=0
for path in /login "/console/assets/console.css" "/console/assets/console.js"; do
  bytes=$(curl -s -o /dev/null -H 'Accept-Encoding: gzip' -w '%{size_download}' "$base$path")
  plain=$(curl -s -o /dev/null -w '%{size_download}' "$base$path")
  printf '   %-32s %7d bytes (%d uncompressed)\n' "$path" "$bytes" "$plain"
  total=$(( total + bytes ))
done
verdict=$([ "$total" -le 153600 ] && echo ok || echo "OVER 150 KB")
echo "   total                            $total bytes  $verdict"
