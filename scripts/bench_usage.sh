#!/usr/bin/env bash
# Usage queries over a big ledger (target: under 50 ms with 1M records), and the CSV export of
# every record (target: the server's peak RSS under 60 MiB).
# A benchmark, not a test: it prints timings and the targets next to them.
#
#   scripts/bench_usage.sh [records (default 1000000)] [sqlite|postgres (default sqlite)]
#
# Starts the release binary (scripts/lib/serve.sh) on a fresh SQLite file, or on a fresh
# PostgreSQL database of the server at $AIGW_BENCH_PG (default postgres://postgres@127.0.0.1:5432),
# dropped afterwards. Then loads N usage records of one user (10 API keys, 5 models, spread
# over the last 30 days) and their daily rollups with plain SQL (sqlite3 / psql), and times
# each usage query 30 times with curl (loopback, the whole HTTP round trip): p50, p95, max;
# then downloads GET /usage/requests/export once and reads the server's VmHWM.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-1000000}
backend=${2:-sqlite}
runs=30
for tool in curl python3 sqlite3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done

pg_server=${AIGW_BENCH_PG:-postgres://postgres@127.0.0.1:5432}
# The per-request records are what GET /usage/requests pages through.
export AIGW__USAGE__REQUEST_RECORDS=database
pg_db=""
if [ "$backend" = postgres ]; then
  command -v psql >/dev/null || { echo "psql not found" >&2; exit 1; }
  pg_db="aigw_bench_usage_$$"
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

user_id=$(curl -sf "$base/api/v1/auth/me" -H "authorization: Bearer $token" | serve_json '["data"]["user"]["id"]')
key_id=$(curl -sf "$base/api/v1/auth/api-keys" -H "authorization: Bearer $token" | serve_json '["data"]["api_keys"][0]["id"]')

echo "== loading $records usage records ($backend)"
started=$(date +%s)
if [ "$backend" = postgres ]; then
  psql -q "$AIGW__DATABASE__URL" <<SQL
CREATE TEMP TABLE bench_records AS
SELECT 'bench-' || lpad(n::text, 8, '0') AS request_id,
       CASE WHEN n % 10 = 0 THEN '$key_id' ELSE 'bench-key-' || (n % 10) END AS api_key_id,
       '$user_id'::text AS user_id, 'model-' || (n % 5) AS model, 'bench'::text AS provider,
       n % 2 = 0 AS streamed, 'ok'::text AS outcome, 100 AS prompt_tokens,
       50 AS completion_tokens, 150 AS total_tokens, n % 7 = 0 AS estimated, 123 AS cost_micros,
       true AS priced, 10 AS latency_ms,
       (now() AT TIME ZONE 'utc') - make_interval(days => n % 30, secs => n % 86400) AS started_at
FROM generate_series(0, $records - 1) AS n;
-- As a node writes them: one batch per user and minute of the calls' start.
INSERT INTO usage_record_batches (user_id, records, oldest_started_at, oldest_request_id,
    newest_started_at, newest_request_id, body)
SELECT user_id, count(*), min(started_at), min(request_id), max(started_at), max(request_id),
    json_agg(json_build_array(request_id, api_key_id, model, provider, streamed, outcome,
        prompt_tokens, completion_tokens, total_tokens, estimated, cost_micros, priced,
        latency_ms, (extract(epoch FROM started_at) * 1000000)::bigint))::text
FROM bench_records GROUP BY user_id, date_trunc('minute', started_at);
INSERT INTO usage_daily (api_key_id, model, day, user_id, requests, prompt_tokens,
    completion_tokens, total_tokens, cost_micros, estimated_requests, unpriced_requests)
SELECT api_key_id, model, to_char(started_at, 'YYYY-MM-DD'), user_id, count(*),
       sum(prompt_tokens), sum(completion_tokens), sum(total_tokens), sum(cost_micros),
       sum(estimated::int), sum((NOT priced)::int)
FROM bench_records GROUP BY 1, 2, 3, 4;
ANALYZE;
SQL
else
  sqlite3 "$work/data/aigw.db" >/dev/null <<SQL
PRAGMA busy_timeout = 10000;
BEGIN;
CREATE TEMP TABLE bench_records AS
WITH RECURSIVE seq(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < $records - 1)
SELECT printf('bench-%08d', n) AS request_id,
       CASE WHEN n % 10 = 0 THEN '$key_id' ELSE 'bench-key-' || (n % 10) END AS api_key_id,
       '$user_id' AS user_id, 'model-' || (n % 5) AS model, 'bench' AS provider,
       n % 2 = 0 AS streamed, 'ok' AS outcome, 100 AS prompt_tokens, 50 AS completion_tokens,
       150 AS total_tokens, n % 7 = 0 AS estimated, 123 AS cost_micros, 1 AS priced,
       10 AS latency_ms,
       strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (n % 30) || ' days', '-' || (n % 86400) || ' seconds') AS started_at
FROM seq;
-- As a node writes them: one batch per user and minute of the calls' start.
INSERT INTO usage_record_batches (user_id, records, oldest_started_at, oldest_request_id,
    newest_started_at, newest_request_id, body)
SELECT user_id, count(*), min(started_at), min(request_id), max(started_at), max(request_id),
    json_group_array(json_array(request_id, api_key_id, model, provider,
        json(CASE WHEN streamed THEN 'true' ELSE 'false' END), outcome, prompt_tokens,
        completion_tokens, total_tokens,
        json(CASE WHEN estimated THEN 'true' ELSE 'false' END), cost_micros,
        json(CASE WHEN priced THEN 'true' ELSE 'false' END), latency_ms,
        CAST(strftime('%s', started_at) AS INTEGER) * 1000000
            + CAST(substr(substr(started_at, 21) || '000000', 1, 6) AS INTEGER)))
FROM bench_records GROUP BY user_id, substr(started_at, 1, 16);
INSERT INTO usage_daily (api_key_id, model, day, user_id, requests, prompt_tokens,
    completion_tokens, total_tokens, cost_micros, estimated_requests, unpriced_requests)
SELECT api_key_id, model, substr(started_at, 1, 10), user_id, count(*),
       sum(prompt_tokens), sum(completion_tokens), sum(total_tokens), sum(cost_micros),
       sum(estimated), sum(1 - priced)
FROM bench_records GROUP BY 1, 2, 3, 4;
COMMIT;
ANALYZE;
SQL
fi
echo "   loaded in $(( $(date +%s) - started )) s"

time_query() { # name, path
  local name=$1 path=$2
  for _ in $(seq "$runs"); do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "$base$path" -H "authorization: Bearer $token"
  done | python3 -c '
import sys
name = sys.argv[1]
rows = [l.split() for l in sys.stdin if l.strip()]
bad = [r[0] for r in rows if r[0] != "200"]
ms = sorted(float(r[1]) * 1000 for r in rows)
p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
verdict = "ok" if p(0.95) < 50 else "OVER 50 ms"
print(f"{name:<58} p50 {p(0.5):6.1f} ms  p95 {p(0.95):6.1f} ms  max {ms[-1]:6.1f} ms  {verdict}" + (f"  non-200: {bad}" if bad else ""))
' "$name"
}

from_year=$(python3 -c 'import datetime; print(datetime.date.today() - datetime.timedelta(days=365))')
echo "== usage queries, $runs runs each (target: under 50 ms)"
time_query "GET /usage (30 days by day)" "/api/v1/usage"
time_query "GET /usage?group_by=model (366 days)" "/api/v1/usage?group_by=model&from=$from_year"
time_query "GET /usage?group_by=api_key" "/api/v1/usage?group_by=api_key"
time_query "GET /usage?api_key_id=... (one key, by day)" "/api/v1/usage?api_key_id=$key_id"
time_query "GET /usage/requests?limit=200 (first page)" "/api/v1/usage/requests?limit=200"
cursor=""
for _ in $(seq 25); do
  cursor=$(curl -sf "$base/api/v1/usage/requests?limit=200${cursor:+&cursor=$cursor}" \
    -H "authorization: Bearer $token" | serve_json '["data"]["next_cursor"]')
done
time_query "GET /usage/requests?limit=200&cursor=... (page 26)" "/api/v1/usage/requests?limit=200&cursor=$cursor"
time_query "GET /auth/api-keys (usage_30d per key)" "/api/v1/auth/api-keys"

# The CSV export of every record, streamed a chunk at a time: the server's peak resident
# memory (VmHWM) must stay flat, under 60 MiB, however many records it sends.
echo "== CSV export of every record (target: peak RSS under 60 MiB)"
rss_kib() { awk -v f="$1" '$1 == f":" {print $2}' "/proc/$pid/status"; }
before=$(rss_kib VmHWM)
started_ns=$(date +%s%N)
curl -sf -o "$work/export.csv" "$base/api/v1/usage/requests/export" -H "authorization: Bearer $token"
elapsed_ms=$(( ($(date +%s%N) - started_ns) / 1000000 ))
lines=$(( $(wc -l < "$work/export.csv") - 1 ))
peak=$(rss_kib VmHWM)
python3 - "$records" "$lines" "$elapsed_ms" "$before" "$peak" "$(stat -c %s "$work/export.csv")" <<'PY'
import sys
records, lines, ms, before, peak, size = map(int, sys.argv[1:])
verdict = "ok" if peak < 60 * 1024 else "OVER 60 MiB"
print(f"{'GET /usage/requests/export':<58} {lines} of {records} records, {size / 2**20:.0f} MiB in {ms / 1000:.1f} s"
      f" ({lines / max(ms, 1) * 1000:,.0f} records/s); peak RSS {before / 1024:.1f} MiB before,"
      f" {peak / 1024:.1f} MiB after  {verdict}")
if lines != records:
    sys.exit(f"the export has {lines} records, not {records}")
PY
