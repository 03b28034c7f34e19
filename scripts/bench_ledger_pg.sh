#!/usr/bin/env bash
# The ledger's statements on PostgreSQL as the call rate doubles: two aigw nodes on one
# throwaway database, API-key chat against the nginx mock upstream at a fixed total rate R and
# then 2R (open loop, crates/bench `rate`, half to each node), with per-request records off
# (the default) and then on. From PostgreSQL's own statistics (pg_stat_database,
# pg_stat_user_tables; pg_stat_statements needs a preloaded library), per second of load:
#
#   transactions   commits in the database (the ledger's flushes, the change feed's heartbeats)
#   flushes        rows inserted into usage_flushes: one per flush, one statement each
#   upserts        rollup rows inserted or updated in usage_daily: one statement each
#   record batches rows of usage_record_batches: one per user and minute of the calls' start
#                  per flush, inserted by one statement per flush
#
#   scripts/bench_ledger_pg.sh [--rate R] [--secs N] [--bin DIR]
#
# Target: the ledger's statements (flushes + upserts; plus one insert per flush with records on)
# at 2R at most twice those at R. Needs nginx, PostgreSQL on 127.0.0.1:5432 (user postgres)
# and psql.
set -euo pipefail
cd "$(dirname "$0")/.."

rate=1000 secs=10 bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift ;;
    --secs) secs=$2; shift ;;
    --bin) bin_dir=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

bench_name=bench-ledger-pg
# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh
need nginx nginx-light
need psql postgresql-client
if [ -n "$bin_dir" ]; then
  bin=$(cd "$bin_dir" && pwd)
else
  cargo build --profile dist --quiet -p aigw-http -p aigw-bench --bins
  bin=$PWD/target/dist
fi
aigw=$bin/aigw srv_cpus="" load_cpus="" key_counters=database
declare -A aigw_pid aigw_base

work=$(mktemp -d)
chmod 755 "$work"
pg_db="aigw_bench_ledger_$$"
cleanup() {
  local status=$?
  bench_stop_all
  psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $pg_db" >/dev/null
url="postgres://postgres@127.0.0.1:5432/$pg_db"
start_refs

stats() {
  psql -h 127.0.0.1 -U postgres -d "$pg_db" -qAt -F' ' -c "SELECT
    (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
    COALESCE((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'usage_flushes'), 0),
    COALESCE((SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = 'usage_daily'), 0),
    COALESCE((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'usage_record_batches'), 0)"
}

printf '| records | calls/s | transactions/s | flushes/s | upserts/s | record batches/s | statements/s |\n|---|---|---|---|---|---|---|\n'
for records in none database; do
  bench_stop_all
  start_refs
  for node in a b; do
    AIGW__USAGE__REQUEST_RECORDS=$records aigw_start "$node-$records" "$url" true info
  done
  aigw_account "${aigw_base[a-$records]}" 2>/dev/null || {
    # The account exists from the previous mode: log in again.
    token=$(http POST "${aigw_base[a-$records]}/api/v1/auth/login" '{"email":"bench@example.com","password":"a long bench passphrase"}' | json_str token)
    key=$(aigw_key "${aigw_base[a-$records]}" '{"name":"bench","permissions":["ai_gateway","read"]}')
  }
  declare -A statements=()
  for r in "$rate" "$((rate * 2))"; do
    sleep 2
    read -r x0 f0 u0 n0 < <(stats)
    for node in a b; do
      "$bin/rate" "${aigw_base[$node-$records]}/api/v1/ai/chat/completions" --rate $((r / 2)) --secs "$secs" \
        --warmup-secs 0 --method POST --header "authorization: $key" \
        --header 'content-type: application/json' --body "$chat_body" >"$work/rate-$node.out" 2>&1 &
    done
    wait_rate=0
    for job in $(jobs -p); do
      case " ${pids[*]} " in *" $job "*) ;; *) wait "$job" || wait_rate=1 ;; esac
    done
    [ "$wait_rate" = 0 ] || { log "rate failed:"; cat "$work"/rate-*.out >&2; exit 1; }
    sleep 3 # the nodes' last flush, and PostgreSQL's statistics (flushed at most every second)
    read -r x1 f1 u1 n1 < <(stats)
    per() { awk -v a="$1" -v b="$2" -v s="$secs" 'BEGIN { printf "%.0f", (b - a) / s }'; }
    # A flush is its usage_flushes insert plus its upserts, and with records on one insert.
    st=$(( (f1 - f0) + (u1 - u0) ))
    if [ "$records" = database ]; then st=$((st + f1 - f0)); fi
    statements[$r]=$(per 0 "$st")
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$records" "$r" "$(per "$x0" "$x1")" "$(per "$f0" "$f1")" \
      "$(per "$u0" "$u1")" "$(per "$n0" "$n1")" "${statements[$r]}"
  done
  log "records $records: ledger statements/s at $((rate * 2)) ÷ at $rate: $(ratio "${statements[$((rate * 2))]}" "${statements[$rate]}") (target <= 2)"
done
