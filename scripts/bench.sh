#!/usr/bin/env bash
# The benchmark: aigw beside a bare actix-web handler and an nginx proxy hop, in one
# run, on this machine (loopback only; every load bounded in time).
#
#   scripts/bench.sh [--quick] [--secs N] [--rounds N] [--conns N] [--threads N] [--keys N]
#                    [--backends "sqlite postgres"] [--key-counters database|node|redis]
#                    [--aigw PATH] [--bin DIR] [--cores N]
#
#   --secs N      seconds per measurement (default 5; --quick: 2)
#   --rounds N    interleaved throughput rounds per backend (default 3; --quick: 1)
#   --conns N     wrk connections (default 32)
#   --threads N   wrk threads (default 1)
#   --keys N      stored API keys for the "many keys" measurement (default 1000000; --quick: 100000)
#   --backends    which aigw backends to run (default "sqlite postgres")
#   --key-counters  aigw's `gateway.key_counters` (default database; node: budgets and
#                 rpm/tpm counted in aigw's memory, one node; redis: in the Redis at
#                 127.0.0.1:6379, which must be running; docs/budgets.md)
#   --aigw PATH   the one aigw binary to measure (relative to the repository's root), e.g. the
#                 profile-guided build of scripts/pgo.sh. Default: two, in one run, each a
#                 column per backend: the `dist` profile's (whole-program LTO, one codegen
#                 unit: what packages and releases ship) and the `release` profile's (what
#                 `cargo run --release` builds), both built first
#   --bin DIR     take aigw, bare, rate, keys and meter from DIR instead of building them (one
#                 aigw, as --aigw)
#   --cores N     pin the servers under test (aigw, bare, the nginx hop) to the first N CPUs
#                 this process may run on (taskset), with N workers each (aigw's
#                 server.workers, bare's second argument, nginx's worker_processes); the mock
#                 upstream (3 workers), wrk and rate run on the other CPUs. Default: no pinning,
#                 one worker per CPU. scripts/bench_cores.sh runs a subset for several N.
#
# It starts, once: `bare` (crates/bench: actix-web answering a fixed JSON body, and a proxy
# route that forwards chat to the mock through aigw's upstream client), an nginx mock
# OpenAI upstream (POST /v1/chat/completions answers a fixed completion) and an nginx reverse
# proxy hop in front of it; then, per backend and profile, aigw (SQLite in a temporary
# folder, or a throwaway PostgreSQL database created on 127.0.0.1:5432 and dropped after) with
# a provider whose base_url is the mock upstream, and beside it two more aigw instances on the
# same database that differ in one setting each: `usage.enabled = false` (unmetered) and
# `log.level = "info,aigw::access=off"` (no access log; the run counts the access lines each
# wrote to check it). It measures, rounds interleaved (bare, /me, /me without the log, hop,
# chat, unmetered chat, ...), with `wrk -tTHREADS -cCONNS`, and reports medians:
#
#   me/bare      GET /auth/me (access token) req/s ÷ bare handler req/s             target >= 0.50
#   chat/hop     API-key chat via aigw req/s ÷ the same request via the nginx hop   target >= 0.50
#   limited/hop  the same with a key that has a budget, an rpm_limit and a tpm_limit
#                (reservations and settlements on every call)                       target >= 0.50
#   team/chat    chat with a key scoped to a team that has a budget and an rpm_limit (every
#                call reserved at the key and the team) ÷ the plain key's chat      target >= 0.9
#   metered/unmetered  API-key chat req/s with usage.enabled = true (the default) ÷ the same
#                with usage.enabled = false                                          target >= 0.9
#                and its p99 (wrk's, at cCONNS): metered ÷ unmetered                 target <= 1.5
#   log/nolog    GET /auth/me req/s with the access log on (the default) ÷ off       target >= 0.9
#   embeddings/hop  an embeddings call via aigw ÷ via the hop; and that ratio ÷ chat/hop,
#                target >= 0.9 (an endpoint of another dialect costs about what chat does)
#   messages/hop a streamed Anthropic Messages call (seven events) via aigw ÷ via the hop; and
#                that ratio ÷ chat/hop, target >= 0.9
#   pair/hop     chat to a model with two healthy deployments (both the mock upstream), via aigw
#                ÷ via the hop, minus chat/hop (one deployment): what choosing costs  target >= -0.02
#   half p99     at a fixed 1000 req/s, after a first second of calls (the dead deployment's
#                breaker opens), p99 of chat to a model one of whose two deployments is down
#                (connection refused) minus p99 of the two-healthy model, µs          target < 1000
#   stream/hop   a streamed chat (`"stream": true`, five server-sent events ending in the usage
#                chunk and `[DONE]`, metered from the events) via aigw ÷ via the hop  (reported)
#   added p50    at a fixed 1000 req/s (`rate`, open loop): (aigw p50 - direct p50) ÷
#                (hop p50 - direct p50), direct = the mock upstream itself          target <= 2
#   added c1     at concurrency 1 (wrk -t1 -c1: one connection, one request at a time, so no
#                queue anywhere), p50 and p99: (aigw - direct) ÷ (hop - direct), for the plain
#                key and for the key with budget + rpm + tpm                          target <= 2
#                The same for `bare`'s proxy route (actix-web and aigw's upstream client, no
#                work of aigw's own: the floor of aigw's stack), and µs aigw adds over it
#                (reported). Unpinned, a hop costs its own CPU work only (the chain tends to
#                run on one CPU); with --cores, each hop wakes a thread on another CPU, as a
#                request from the network does (docs/performance.md)
#   storm p99    /me p99 at 500 req/s during a login storm (wrk -c8 on /auth/login,
#                argon2id 19 MiB t=2) ÷ the same p99 without it                      target <= 3
#   metering     (scripts/bench_meter.sh, after the table) calls/s the usage pipeline makes
#                durable with no HTTP, records off / on          target >= 2,000,000 / 300,000
#   RSS          VmRSS after start-up and warm-up; VmHWM over the cCONNS rounds      target <= 30 / 40 MiB
#                (most of it is the binary's code, mapped from the file as it runs; the
#                anonymous part, RssAnon, is the heap, stacks and buffers)           (reported)
#   keys 1M/1k   GET /auth/me with API keys (1000 keys, round robin) req/s with N keys
#                stored ÷ with 1000 stored (bulk-inserted with SQL)                  target >= 0.9
#   lists p99    at 50 req/s, with the N keys made one team's team keys and the user a member
#                of 10 000 teams: GET /teams?limit=50 and GET /teams/{id}/api-keys?limit=50
#                p99 (ms)                                                            target <= 50
#
# Needs nginx, wrk, sqlite3, python3 (installed with apt-get when missing and root; wrk and
# nginx are taken from .bench-tools/ when scripts/bench_bundle.sh made it), and for PostgreSQL
# a server on 127.0.0.1:5432 that user postgres may use (else it is skipped). The pieces it is
# made of are in scripts/lib/bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=5 rounds=3 conns=32 many_keys=1000000 backends="sqlite postgres" key_counters=database aigw="" cores="" wrk_threads=1 bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) secs=2 rounds=1 many_keys=100000 ;;
    --secs) secs=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --conns) conns=$2; shift ;;
    --threads) wrk_threads=$2; shift ;;
    --keys) many_keys=$2; shift ;;
    --backends) backends=$2; shift ;;
    --key-counters) key_counters=$2; shift ;;
    --aigw) aigw=$2; shift ;;
    --bin) bin_dir=$2; shift ;;
    --cores) cores=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

bench_name=bench
# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh

case "$key_counters" in
  database|node) ;;
  redis)
    # The counters' Redis: the default rate_limit.redis_url.
    if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
      echo "--key-counters redis needs a Redis server on 127.0.0.1:6379" >&2; exit 2
    fi ;;
  *) echo "--key-counters: database, node or redis, not $key_counters" >&2; exit 2 ;;
esac

need wrk wrk
need nginx nginx-light
need sqlite3 sqlite3
need python3 python3

if [ -n "$cores" ]; then
  need taskset util-linux
  mapfile -t cpus < <(cpu_list)
  if [ "$cores" -lt 1 ] || [ "$cores" -ge "${#cpus[@]}" ]; then
    log "--cores $cores: this process may run on ${#cpus[@]} CPUs, some must be left for the load"; exit 2
  fi
  srv_cpus=$(IFS=,; echo "${cpus[*]:0:cores}")
  load_cpus=$(IFS=,; echo "${cpus[*]:cores}")
  srv_workers=$cores mock_workers=3
  log "server under test on CPUs $srv_cpus ($cores workers); mock upstream and wrk on CPUs $load_cpus"
fi

# Where cargo builds (CARGO_TARGET_DIR, else target/), as an absolute path.
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir=$PWD/$target_dir ;; esac
# The aigw binaries measured, by profile ("given": the one of --aigw or --bin).
declare -A profile_bins
if [ -n "$bin_dir" ]; then
  bin=$(cd "$bin_dir" && pwd)
else
  log "building the dist profile (aigw, bare, rate, keys, meter)"
  cargo build --profile dist --quiet -p aigw-http -p aigw-bench --bins
  bin=$target_dir/dist
fi
if [ -n "$aigw" ] || [ -n "$bin_dir" ]; then
  case "${aigw:=$bin/aigw}" in /*) ;; *) aigw=$PWD/$aigw ;; esac
  [ -x "$aigw" ] || { log "--aigw: $aigw is not an executable"; exit 2; }
  profile_bins[given]=$aigw profiles=(given)
else
  log "building the release profile's aigw (what \`cargo run --release\` runs)"
  cargo build --release --quiet -p aigw-http --bin aigw
  profile_bins[dist]=$bin/aigw
  profile_bins[release]=$target_dir/release/aigw
  profiles=(dist release)
fi

work=$(mktemp -d)
chmod 755 "$work"
pg_db=""
cleanup() {
  local status=$?
  bench_stop_all
  if [ -n "$pg_db" ]; then psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# --- references: bare actix, nginx mock upstream, nginx hop ------------------------------------
start_refs

declare -A result

# --- one backend --------------------------------------------------------------------------------
run_backend() {
  local backend=$1 col=$2 url pid base unmetered nolog token key limited user_id sql dir="$work/aigw-$2"
  mkdir -p "$dir"
  case "$backend" in
    sqlite)
      url="sqlite://$dir/aigw.db"
      sql() { sqlite3 -cmd '.timeout 10000' "$dir/aigw.db"; } ;;
    postgres)
      pg_db="aigw_bench_$$"
      psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $pg_db" >/dev/null
      url="postgres://postgres@127.0.0.1:5432/$pg_db"
      sql() { psql -q -h 127.0.0.1 -U postgres -d "$pg_db" >/dev/null; } ;;
  esac
  # Three instances on one database: the one measured throughout (metering on, access log
  # on, as in production), then the same with usage.enabled = false, and with the access log
  # off; idle while another is measured.
  aigw_start "$col" "$url" true info
  aigw_start "$col-unmetered" "$url" false info
  aigw_start "$col-nolog" "$url" true "info,aigw::access=off"
  pid=${aigw_pid[$col]} base=${aigw_base[$col]}
  unmetered=${aigw_base[$col-unmetered]} nolog=${aigw_base[$col-nolog]}
  aigw_account "$base"
  # A key whose every call reserves and settles a budget, a request and a token count (limits
  # far above what the run can reach, so that nothing is refused).
  limited=$(aigw_key "$base" '{"name":"bench-limited","permissions":["ai_gateway"],"max_budget_usd":1000000,"budget_period":"monthly","rpm_limit":1000000000,"tpm_limit":1000000000}')
  http POST "$base/api/v1/ai/chat/completions" "$chat_body" "authorization: $limited" >/dev/null
  # A key scoped to a team with a budget and an rpm_limit: every call counts at the key and
  # the team (limits out of reach).
  local team_id team_key
  team_id=$(http POST "$base/api/v1/teams" '{"name":"bench","max_budget_usd":1000000,"budget_period":"monthly","rpm_limit":1000000000}' \
    "authorization: Bearer $token" | json_str id)
  team_key=$(aigw_key "$base" "{\"name\":\"bench-team\",\"permissions\":[\"ai_gateway\"],\"team_id\":\"$team_id\"}")
  http POST "$base/api/v1/ai/chat/completions" "$chat_body" "authorization: $team_key" >/dev/null
  http POST "$unmetered/api/v1/ai/chat/completions" "$chat_body" "authorization: $key" >/dev/null
  for b in "$base" "$nolog"; do wrk_rps 4 1 -H "authorization: Bearer $token" "$b/api/v1/auth/me" >/dev/null; done
  sleep 1
  result[$col,rss_idle]=$(( $(rss_kib "$pid" VmRSS) / 1024 ))
  result[$col,anon_idle]=$(( $(rss_kib "$pid" RssAnon) / 1024 ))
  echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true # reset VmHWM: the peak of what follows

  log "$col: $rounds round(s) of bare, /me, /me log off, hop, chat, chat unmetered, limited, team, streams, embeddings, messages, two deployments (${secs}s each, c$conns)"
  local bare_l="" me_l="" me_nolog_l="" hop_l="" chat_l="" chat_p99_l="" unmetered_l="" unmetered_p99_l="" limited_l="" team_l="" stream_hop_l="" stream_l="" embed_hop_l="" embed_l="" messages_hop_l="" messages_l="" pair_l="" r
  for _ in $(seq "$rounds"); do
    bare_l+=" $(wrk_rps "$conns" "$secs" "http://127.0.0.1:$bare_port/")"
    me_l+=" $(wrk_rps "$conns" "$secs" -H "authorization: Bearer $token" "$base/api/v1/auth/me")"
    me_nolog_l+=" $(wrk_rps "$conns" "$secs" -H "authorization: Bearer $token" "$nolog/api/v1/auth/me")"
    hop_l+=" $(wrk_rps "$conns" "$secs" -s "$post_lua" "http://127.0.0.1:$hop_port/v1/chat/completions")"
    r=$(wrk_run "$conns" "$secs" -s "$post_lua" -H "authorization: $key" "$base/api/v1/ai/chat/completions")
    chat_l+=" ${r% *}" chat_p99_l+=" ${r#* }"
    r=$(wrk_run "$conns" "$secs" -s "$post_lua" -H "authorization: $key" "$unmetered/api/v1/ai/chat/completions")
    unmetered_l+=" ${r% *}" unmetered_p99_l+=" ${r#* }"
    limited_l+=" $(wrk_rps "$conns" "$secs" -s "$post_lua" -H "authorization: $limited" "$base/api/v1/ai/chat/completions")"
    team_l+=" $(wrk_rps "$conns" "$secs" -s "$post_lua" -H "authorization: $team_key" "$base/api/v1/ai/chat/completions")"
    stream_hop_l+=" $(wrk_rps "$conns" "$secs" -s "$stream_lua" "http://127.0.0.1:$hop_port/stream/v1/chat/completions")"
    stream_l+=" $(wrk_rps "$conns" "$secs" -s "$stream_lua" -H "authorization: $key" "$base/api/v1/ai/chat/completions")"
    embed_hop_l+=" $(wrk_rps "$conns" "$secs" -s "$embed_lua" "http://127.0.0.1:$hop_port/v1/embeddings")"
    embed_l+=" $(wrk_rps "$conns" "$secs" -s "$embed_lua" -H "authorization: $key" "$base/api/v1/ai/embeddings")"
    messages_hop_l+=" $(wrk_rps "$conns" "$secs" -s "$messages_lua" "http://127.0.0.1:$hop_port/anthropic/v1/messages")"
    messages_l+=" $(wrk_rps "$conns" "$secs" -s "$messages_lua" -H "x-api-key: $key" "$base/api/v1/ai/anthropic/v1/messages")"
    pair_l+=" $(wrk_rps "$conns" "$secs" -s "$pair_lua" -H "authorization: $key" "$base/api/v1/ai/chat/completions")"
  done
  result[$col,bare]=$(echo "$bare_l" | median)
  result[$col,me]=$(echo "$me_l" | median)
  result[$col,me_nolog]=$(echo "$me_nolog_l" | median)
  result[$col,hop]=$(echo "$hop_l" | median)
  result[$col,chat]=$(echo "$chat_l" | median)
  result[$col,chat_p99]=$(echo "$chat_p99_l" | median)
  result[$col,unmetered]=$(echo "$unmetered_l" | median)
  result[$col,unmetered_p99]=$(echo "$unmetered_p99_l" | median)
  result[$col,limited]=$(echo "$limited_l" | median)
  result[$col,team]=$(echo "$team_l" | median)
  result[$col,stream_hop]=$(echo "$stream_hop_l" | median)
  result[$col,stream]=$(echo "$stream_l" | median)
  result[$col,embed_hop]=$(echo "$embed_hop_l" | median)
  result[$col,embed]=$(echo "$embed_l" | median)
  result[$col,messages_hop]=$(echo "$messages_hop_l" | median)
  result[$col,messages]=$(echo "$messages_l" | median)
  result[$col,pair]=$(echo "$pair_l" | median)
  result[$col,rss_peak]=$(( $(rss_kib "$pid" VmHWM) / 1024 ))
  result[$col,anon_after]=$(( $(rss_kib "$pid" RssAnon) / 1024 ))
  access_lines_check "$col"
  aigw_stop "$col-unmetered"; aigw_stop "$col-nolog" # done: only the main one is measured below

  log "$col: p50 at a fixed 1000 req/s: direct upstream, nginx hop, aigw"
  local direct hop via
  direct=$(rate_p "http://127.0.0.1:$mock_port/v1/chat/completions" --method POST --body "$chat_body" | cut -d' ' -f1)
  hop=$(rate_p "http://127.0.0.1:$hop_port/v1/chat/completions" --method POST --body "$chat_body" | cut -d' ' -f1)
  via=$(rate_p "$base/api/v1/ai/chat/completions" --method POST --body "$chat_body" --header "authorization: $key" | cut -d' ' -f1)
  result[$col,p50_direct]=$direct
  result[$col,p50_hop]=$hop
  result[$col,p50_aigw]=$via
  result[$col,added]=$(ratio $((via - direct)) $((hop - direct)))

  log "$col: p99 at a fixed 1000 req/s: two healthy deployments, one of two down (after a first second)"
  local pair_p99 half_p99
  # rate's first second is its warm-up, not measured: the dead deployment's breaker opens then.
  pair_p99=$(rate_p "$base/api/v1/ai/chat/completions" --method POST --body "$pair_body" --header "authorization: $key" | cut -d' ' -f2)
  half_p99=$(rate_p "$base/api/v1/ai/chat/completions" --method POST --body "$half_body" --header "authorization: $key" | cut -d' ' -f2)
  result[$col,half]="$((half_p99 - pair_p99))"
  result[$col,half_p99s]="$pair_p99 / $half_p99"

  log "$col: latency at concurrency 1 (one connection), $rounds interleaved round(s): direct upstream, nginx hop, bare proxy, aigw, aigw with key limits"
  local c1_direct_l="" c1_hop_l="" c1_bare_l="" c1_aigw_l="" c1_limited_l="" c1_direct c1_hop c1_bare c1_aigw c1_limited
  for _ in $(seq "$rounds"); do
    c1_direct_l+=",$(wrk_latency "$secs" -s "$post_lua" "http://127.0.0.1:$mock_port/v1/chat/completions")"
    c1_hop_l+=",$(wrk_latency "$secs" -s "$post_lua" "http://127.0.0.1:$hop_port/v1/chat/completions")"
    c1_bare_l+=",$(wrk_latency "$secs" -s "$post_lua" "http://127.0.0.1:$bare_port/v1/chat/completions")"
    c1_aigw_l+=",$(wrk_latency "$secs" -s "$post_lua" -H "authorization: $key" "$base/api/v1/ai/chat/completions")"
    c1_limited_l+=",$(wrk_latency "$secs" -s "$post_lua" -H "authorization: $limited" "$base/api/v1/ai/chat/completions")"
  done
  c1_direct=$(median_pair "$c1_direct_l") c1_hop=$(median_pair "$c1_hop_l") c1_bare=$(median_pair "$c1_bare_l")
  c1_aigw=$(median_pair "$c1_aigw_l") c1_limited=$(median_pair "$c1_limited_l")
  result[$col,c1]="$c1_direct / $c1_hop / $c1_bare / $c1_aigw / $c1_limited"
  result[$col,c1_bare_added]=$(added_ratios "$c1_direct" "$c1_hop" "$c1_bare")
  result[$col,c1_over_bare]=$(over "$c1_bare" "$c1_aigw")" / "$(over "$c1_bare" "$c1_limited")
  result[$col,c1_added]=$(added_ratios "$c1_direct" "$c1_hop" "$c1_aigw")
  result[$col,c1_limited_added]=$(added_ratios "$c1_direct" "$c1_hop" "$c1_limited")
  result[$col,c1_over_hop]=$(over "$c1_hop" "$c1_aigw")" / "$(over "$c1_hop" "$c1_limited")

  log "$col: /me p99 at 500 req/s, idle and during a login storm"
  local idle storm login_lua="$dir/login.lua"
  idle=$(rate_p "$base/api/v1/auth/me" --rate 500 --header "authorization: Bearer $token" | cut -d' ' -f2)
  post_script "$login_lua" '{"email":"bench@example.com","password":"a long bench passphrase"}'
  pin "$load_cpus" wrk -t1 -c8 -d"$((secs + 3))s" -s "$login_lua" "$base/api/v1/auth/login" >"$dir/storm.txt" &
  local storm_pid=$!
  sleep 1
  storm=$(rate_p "$base/api/v1/auth/me" --rate 500 --header "authorization: Bearer $token" | cut -d' ' -f2)
  wait "$storm_pid" || true
  result[$col,p99_idle]=$idle
  result[$col,p99_storm]=$storm
  result[$col,logins]=$(awk '/^Requests\/sec/ { print $2 }' "$dir/storm.txt")
  result[$col,storm]=$(ratio "$storm" "$idle")

  log "$col: API-key auth with 1000 keys stored, then with $many_keys"
  "$bin/keys" 1000 >"$dir/keys.csv"
  python3 - "$dir/keys.csv" "$user_id" >"$dir/keys.sql" <<'PY'
import sys, uuid
rows = [l.strip().split(",") for l in open(sys.argv[1])]
print("BEGIN;")
for key, digest, prefix in rows:
    print(f"INSERT INTO api_keys (id, user_id, name, key_prefix, key_hash, permissions, created_at) VALUES "
          f"('{uuid.uuid4()}', '{sys.argv[2]}', 'bench', '{prefix}', '{digest}', 'read', '2026-11-22 00:00:00');")
print("COMMIT;")
PY
  sql <"$dir/keys.sql"
  python3 - "$dir/keys.csv" >"$dir/keys.lua" <<'PY'
import sys
keys = [l.split(",")[0] for l in open(sys.argv[1])]
print("local keys = {" + ",".join(f'"{k}"' for k in keys) + "}")
print("local i = 0")
print("request = function() i = i % #keys + 1; return wrk.format('GET', nil, {authorization = keys[i]}) end")
PY
  local few many
  wrk_rps "$conns" 1 -s "$dir/keys.lua" "$base/api/v1/auth/me" >/dev/null # warm the cache
  few=$(wrk_rps "$conns" "$secs" -s "$dir/keys.lua" "$base/api/v1/auth/me")
  local filler=$((many_keys - 1000))
  case "$backend" in
    sqlite) echo "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $filler)
      INSERT INTO api_keys (id, user_id, name, key_prefix, key_hash, permissions, created_at)
      SELECT lower(hex(randomblob(16))), '$user_id', 'filler', 'aigw_filler0', lower(hex(randomblob(32))), 'read', '2026-11-22 00:00:00' FROM n;
      ANALYZE;" | sql ;;
    postgres) echo "INSERT INTO api_keys (id, user_id, name, key_prefix, key_hash, permissions, created_at)
      SELECT md5('id' || i), '$user_id', 'filler', 'aigw_filler0', encode(sha256(('filler' || i)::bytea), 'hex'), 'read', now()
      FROM generate_series(1, $filler) AS i; ANALYZE;" | sql ;;
  esac
  wrk_rps "$conns" 1 -s "$dir/keys.lua" "$base/api/v1/auth/me" >/dev/null
  many=$(wrk_rps "$conns" "$secs" -s "$dir/keys.lua" "$base/api/v1/auth/me")
  result[$col,keys_few]=$few
  result[$col,keys_many]=$many
  result[$col,keys]=$(ratio "$many" "$few")

  log "$col: list pages with the $filler filler keys made team keys and 10000 teams"
  case "$backend" in
    sqlite) echo "UPDATE api_keys SET team_id = '$team_id', team_owned = TRUE WHERE name = 'filler';
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 9999)
      INSERT INTO teams (id, name, created_by, created_at, updated_at)
      SELECT lower(hex(randomblob(16))), 'filler', '$user_id', '2026-11-22 00:00:00', '2026-11-22 00:00:00' FROM n;
      INSERT INTO team_members (team_id, user_id, role, created_at)
      SELECT id, '$user_id', 'member', created_at FROM teams WHERE name = 'filler';
      ANALYZE;" | sql ;;
    postgres) echo "UPDATE api_keys SET team_id = '$team_id', team_owned = TRUE WHERE name = 'filler';
      INSERT INTO teams (id, name, created_by, created_at, updated_at)
      SELECT md5('team' || i), 'filler', '$user_id', now(), now() FROM generate_series(1, 9999) AS i;
      INSERT INTO team_members (team_id, user_id, role, created_at)
      SELECT id, '$user_id', 'member', created_at FROM teams WHERE name = 'filler';
      ANALYZE;" | sql ;;
  esac
  local teams_p99 team_keys_p99
  wrk_rps 4 1 -H "authorization: Bearer $token" "$base/api/v1/teams?limit=50" >/dev/null # warm-up
  wrk_rps 4 1 -H "authorization: Bearer $token" "$base/api/v1/teams/$team_id/api-keys?limit=50" >/dev/null
  teams_p99=$(rate_p "$base/api/v1/teams?limit=50" --rate 50 --header "authorization: Bearer $token" | cut -d' ' -f2)
  team_keys_p99=$(rate_p "$base/api/v1/teams/$team_id/api-keys?limit=50" --rate 50 --header "authorization: Bearer $token" | cut -d' ' -f2)
  result[$col,lists]=$(awk -v a="$teams_p99" -v b="$team_keys_p99" 'BEGIN { printf "%.1f / %.1f\n", a / 1000, b / 1000 }')

  result[$col,me_ratio]=$(ratio "${result[$col,me]}" "${result[$col,bare]}")
  result[$col,chat_ratio]=$(ratio "${result[$col,chat]}" "${result[$col,hop]}")
  result[$col,limited_ratio]=$(ratio "${result[$col,limited]}" "${result[$col,hop]}")
  result[$col,team_ratio]=$(ratio "${result[$col,team]}" "${result[$col,chat]}")
  result[$col,stream_ratio]=$(ratio "${result[$col,stream]}" "${result[$col,stream_hop]}")
  result[$col,embed_ratio]=$(ratio "${result[$col,embed]}" "${result[$col,embed_hop]}")
  result[$col,messages_ratio]=$(ratio "${result[$col,messages]}" "${result[$col,messages_hop]}")
  result[$col,messages_vs_chat]=$(ratio_of_ratios "${result[$col,messages]}" "${result[$col,messages_hop]}" "${result[$col,chat]}" "${result[$col,hop]}")
  result[$col,pair_vs_chat]=$(awk -v p="${result[$col,pair]}" -v c="${result[$col,chat]}" -v h="${result[$col,hop]}" 'BEGIN { printf "%+.3f\n", (p - c) / h }')
  result[$col,embed_vs_chat]=$(ratio_of_ratios "${result[$col,embed]}" "${result[$col,embed_hop]}" "${result[$col,chat]}" "${result[$col,hop]}")
  result[$col,metered_ratio]=$(ratio "${result[$col,chat]}" "${result[$col,unmetered]}")
  result[$col,metered_p99_ratio]=$(ratio "${result[$col,chat_p99]}" "${result[$col,unmetered_p99]}")
  result[$col,log_ratio]=$(ratio "${result[$col,me]}" "${result[$col,me_nolog]}")
  result[$col,unmetered_rps]="${result[$col,chat]} / ${result[$col,unmetered]}"
  result[$col,unmetered_p99s]="${result[$col,chat_p99]} / ${result[$col,unmetered_p99]}"
  result[$col,nolog_rps]="${result[$col,me]} / ${result[$col,me_nolog]}"
  result[$col,rss]="${result[$col,rss_idle]} / ${result[$col,rss_peak]}"
  result[$col,anon]="${result[$col,anon_idle]} / ${result[$col,anon_after]}"
  result[$col,p50s]="$direct / $hop / $via"
  result[$col,p99s]="$idle / $storm (${result[$col,logins]})"
  result[$col,keyrps]="$few / $many"
  result[$col,streams]="${result[$col,stream_hop]} / ${result[$col,stream]}"
  result[$col,embeds]="${result[$col,embed_hop]} / ${result[$col,embed]}"
  result[$col,messages_rps]="${result[$col,messages_hop]} / ${result[$col,messages]}"

  aigw_stop "$col"
  if [ "$backend" = postgres ]; then
    psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null
    pg_db=""
  fi
}

ran=() ran_backends=()
for profile in "${profiles[@]}"; do
  aigw=${profile_bins[$profile]}
  for backend in $backends; do
    if [ "$backend" = postgres ] && ! psql -q -h 127.0.0.1 -U postgres -c 'SELECT 1' >/dev/null 2>&1; then
      log "PostgreSQL not reachable on 127.0.0.1:5432 as postgres: skipped"
      continue
    fi
    column=$backend
    [ "$profile" = given ] || column+="-$profile"
    run_backend "$backend" "$column"
    ran+=("$column")
    case " ${ran_backends[*]} " in *" $backend "*) ;; *) ran_backends+=("$backend") ;; esac
  done
done

# --- report -------------------------------------------------------------------------------------
col() { local out=""; for b in "${ran[@]}"; do out+=" ${result[$b,$1]} |"; done; echo "$out"; }
header="| measurement |"; rule="|---|"
for b in "${ran[@]}"; do header+=" $b |"; rule+="---|"; done
echo
echo "aigw benchmark: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), secs=$secs rounds=$rounds conns=$conns threads=$wrk_threads keys=$many_keys key_counters=$key_counters aigw=${aigw#"$PWD"/}${cores:+ cores=$cores (server on CPUs $srv_cpus, load on $load_cpus)}"
echo
echo "$header target |"; echo "$rule---|"
echo "| GET /auth/me ÷ bare actix (req/s) |$(col me_ratio) >= 0.50 |"
echo "| API-key chat via aigw ÷ nginx hop (req/s) |$(col chat_ratio) >= 0.50 |"
echo "| chat with budget + rpm + tpm on the key ÷ nginx hop (req/s) |$(col limited_ratio) >= 0.50 |"
echo "| chat with a team-scoped key (team budget + rpm) ÷ plain key chat (req/s) |$(col team_ratio) >= 0.9 |"
echo "| streamed chat via aigw ÷ the same stream via the nginx hop (req/s) |$(col stream_ratio) – |"
echo "| embeddings via aigw ÷ via the nginx hop (req/s) |$(col embed_ratio) – |"
echo "| (embeddings ÷ hop) ÷ (chat ÷ hop) |$(col embed_vs_chat) >= 0.9 |"
echo "| streamed Anthropic Messages via aigw ÷ via the nginx hop (req/s) |$(col messages_ratio) – |"
echo "| (streamed Messages ÷ hop) ÷ (chat ÷ hop) |$(col messages_vs_chat) >= 0.9 |"
echo "| (two deployments' chat ÷ hop) − (one deployment's chat ÷ hop) |$(col pair_vs_chat) >= -0.02 |"
echo "| p99 added by one of two deployments being down, at 1000 req/s (µs) |$(col half) < 1000 |"
echo "| chat metered ÷ unmetered (req/s) |$(col metered_ratio) >= 0.9 |"
echo "| chat p99 metered ÷ unmetered (wrk c$conns) |$(col metered_p99_ratio) <= 1.5 |"
echo "| GET /auth/me access log on ÷ off (req/s) |$(col log_ratio) >= 0.9 |"
echo "| p50 added over direct upstream at 1000 req/s, aigw ÷ nginx |$(col added) <= 2 |"
echo "| latency added over direct upstream at concurrency 1, aigw ÷ nginx hop, p50 / p99 |$(col c1_added) <= 2 |"
echo "| the same with a key with budget + rpm + tpm |$(col c1_limited_added) <= 2 |"
echo "| the same for the bare proxy (actix-web + aigw's upstream client, the stack's floor) |$(col c1_bare_added) – |"
echo "| /auth/me p99 during a login storm ÷ idle |$(col storm) <= 3 |"
echo "| RSS idle / peak under c$conns (MiB) |$(col rss) <= 30 / 40 |"
echo "| of which anonymous, idle / after the c$conns rounds (MiB) |$(col anon) (reported) |"
echo "| API-key auth req/s, $many_keys keys stored ÷ 1000 |$(col keys) >= 0.9 |"
echo "| p99 ms at 50 req/s: GET /teams (10 000 teams) / GET /teams/{id}/api-keys ($many_keys keys) |$(col lists) <= 50 |"
echo
echo "$header"; echo "$rule"
echo "| bare actix req/s (median) |$(col bare)"
echo "| GET /auth/me req/s |$(col me)"
echo "| nginx hop chat req/s |$(col hop)"
echo "| aigw chat req/s |$(col chat)"
echo "| aigw chat req/s, key with budget + rpm + tpm |$(col limited)"
echo "| aigw chat req/s, team-scoped key (team budget + rpm) |$(col team)"
echo "| streamed chat req/s: nginx hop / aigw |$(col streams)"
echo "| embeddings req/s: nginx hop / aigw |$(col embeds)"
echo "| streamed Messages req/s: nginx hop / aigw |$(col messages_rps)"
echo "| aigw chat req/s, a model with two deployments |$(col pair)"
echo "| chat p99 µs at 1000 req/s: two healthy deployments / one of two down |$(col half_p99s)"
echo "| aigw chat req/s: metered / unmetered |$(col unmetered_rps)"
echo "| aigw chat p99 µs (wrk c$conns): metered / unmetered |$(col unmetered_p99s)"
echo "| GET /auth/me req/s: access log on / off |$(col nolog_rps)"
echo "| p50 µs at 1000 req/s: direct / hop / aigw |$(col p50s)"
echo "| p50 p99 µs at concurrency 1: direct / hop / bare proxy / aigw / aigw with key limits |$(col c1)"
echo "| µs aigw adds over the nginx hop at concurrency 1, p50 p99: plain key / key with limits |$(col c1_over_hop)"
echo "| µs aigw adds over the bare proxy at concurrency 1, p50 p99: plain key / key with limits |$(col c1_over_bare)"
echo "| /me p99 µs at 500 req/s: idle / storm (logins/s) |$(col p99s)"
echo "| API-key auth req/s: 1000 / $many_keys keys stored |$(col keyrps)"

# The metering capacity row (no HTTP): scripts/bench_meter.sh, same backends.
if [ -x "$bin/meter" ]; then
  echo
  scripts/bench_meter.sh --secs "$secs" --backends "${ran_backends[*]}" --meter "$bin/meter"
else
  log "no $bin/meter: the metering capacity row is skipped"
fi
