#!/usr/bin/env bash
# The metering capacity row: calls per second the usage pipeline takes in and makes durable,
# fed by an in-process generator (crates/bench/src/bin/meter.rs: one thread per core, 1,000
# keys × 5 models, no HTTP), per backend, with per-request records off and on.
#
#   scripts/bench_meter.sh [--secs N] [--backends "sqlite postgres"] [--meter PATH]
#
# Targets: at least 2,000,000/s with records off and 300,000/s with them on, on each backend.
# Every run checks the ledger: the rollups' sum of requests equals the calls fed, and with
# records on so does the number of rows. PostgreSQL: a throwaway database on 127.0.0.1:5432
# (user postgres), created and dropped here; skipped when no server answers.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=5 backends="sqlite postgres" meter=""
while [ $# -gt 0 ]; do
  case "$1" in
    --secs) secs=$2; shift ;;
    --backends) backends=$2; shift ;;
    --meter) meter=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$meter" ]; then
  cargo build --profile dist -p aigw-bench --bin meter >&2
  meter=target/dist/meter
fi

work=$(mktemp -d)
pg_dbs=()
cleanup() {
  for db in "${pg_dbs[@]}"; do
    psql -h 127.0.0.1 -U postgres -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

printf '| backend | records | calls/s | target | calls | flushes |\n|---|---|---|---|---|---|\n'
for backend in $backends; do
  for records in none database; do
    case "$backend" in
      sqlite) url="sqlite://$work/meter-$records.db" ;;
      postgres)
        if ! psql -h 127.0.0.1 -U postgres -qAtc 'SELECT 1' >/dev/null 2>&1; then
          echo "PostgreSQL not reachable on 127.0.0.1:5432: skipped" >&2; continue
        fi
        db="aigw_meter_$$_$records"
        psql -h 127.0.0.1 -U postgres -qAtc "CREATE DATABASE $db" >/dev/null
        pg_dbs+=("$db")
        url="postgres://postgres@127.0.0.1:5432/$db" ;;
      *) echo "unknown backend $backend" >&2; exit 2 ;;
    esac
    target=2000000; [ "$records" = database ] && target=300000
    out=$("$meter" --database "$url" --records "$records" --secs "$secs")
    rate=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["per_sec"])')
    fed=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["fed"])')
    flushes=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["flushes"])')
    printf '| %s | %s | %s | >= %s | %s | %s |\n' "$backend" "$records" "$rate" "$target" "$fed" "$flushes"
  done
done
