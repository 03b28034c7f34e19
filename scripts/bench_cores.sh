#!/usr/bin/env bash
# Scaling with cores: the servers under test pinned to N CPUs, for several N, in one run on this
# machine (loopback only; every load bounded in time). A subset of scripts/bench.sh, made of the
# same pieces (scripts/lib/bench.sh).
#
#   scripts/bench_cores.sh [--cores-list "1 2 4 8"] [--secs N] [--rounds N] [--conns N]
#                          [--threads N] [--backends "sqlite"] [--min-spare N] [--out DIR]
#                          [--bin DIR] [--aigw PATH]
#
#   --cores-list  the values of N (default "1 2 4 8")
#   --secs N      seconds per measurement (default 3), after a 1 s warm-up of each target
#   --rounds N    interleaved rounds per N (default 1; medians when more)
#   --conns N     wrk connections (default 128)
#   --threads N   wrk threads (default 5)
#   --backends    "sqlite" (default), "postgres" or both; PostgreSQL needs a server on
#                 127.0.0.1:5432 that user postgres may use (a throwaway database per N)
#   --min-spare N CPUs that must be left over for the load (default 6): an N that leaves fewer
#                 is skipped, and said so
#   --out DIR     also write the report (bench_cores.md) and the progress (bench_cores.log) there
#   --bin DIR     take aigw and bare from DIR (e.g. another checkout's target/dist)
#   --aigw PATH   the aigw binary to measure
#
# For each N: the CPUs this process may run on (its affinity, hyperthread siblings next to each
# other; as many as the cgroup's CPU quota allows) are split into the first N, for the servers
# under test, and the rest, for the load. On the
# first N, each with N workers: `bare` (actix-web answering a fixed JSON body, and its proxy route; N as its
# second argument), the nginx hop (worker_processes N) and three aigw instances on one SQLite
# database in a fresh temporary folder (server.workers = N): as in production (metering on,
# one JSON access-log line per request), with usage.enabled = false, and with
# log.level = "info,aigw::access=off". On the rest: the nginx mock OpenAI upstream
# (worker_processes 3) and wrk (-t5 -c128). Each target gets a 1 s warm-up, then SECS of wrk;
# the columns (req/s):
#
#   bare actix GET      GET / on bare: what actix itself does on N cores
#   nginx proxy hop     the chat request POSTed through the nginx hop to the mock upstream
#   aigw API-key chat   the same request to aigw's /api/v1/ai/chat/completions with an API
#                       key (authenticated, routed, proxied, metered, access-logged)
#   aigw GET /auth/me   GET /api/v1/auth/me with an access token
#   chat ÷ hop          aigw API-key chat ÷ nginx proxy hop        target at N=8 >= 0.4, and
#                       not below its value at N=1 by more than 0.1 (first and last N run)
#   chat unmetered      aigw API-key chat with usage.enabled = false
#   me nolog            aigw GET /auth/me with the access log off
#
# and a second table per N: chat metered ÷ unmetered (target >= 0.9), chat p99 metered ÷
# unmetered (wrk's p99, target <= 1.5), /auth/me log on ÷ off (target >= 0.9), and aigw's
# peak RSS (VmHWM over the measurements, target <= 40 MiB); and a third: p50 and p99 at
# concurrency 1 (wrk -t1 -c1 on the load's CPUs) straight to the mock, through the hop,
# through bare's proxy route (actix-web and aigw's upstream client: the floor of aigw's stack)
# and through aigw, with what the bare proxy and aigw add over the mock ÷ what the hop adds.
#
# Tools: when .bench-tools/ exists (scripts/bench_bundle.sh: wrk, nginx, taskset, aigw,
# bare with their own libraries and loader) they are used from there and nothing is installed
# or built; else wrk, nginx and taskset come from PATH (apt-get when missing and root) and the
# binaries from `cargo build --profile dist` (or --bin / --aigw). Needs no curl, no python3, no
# PostgreSQL or Redis for the SQLite run. About 45 s per N with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

cores_list="1 2 4 8" secs=3 rounds=1 conns=128 wrk_threads=5 backends=sqlite min_spare=6
out="" bin_dir="" aigw=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cores-list) cores_list=$2; shift ;;
    --secs) secs=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --conns) conns=$2; shift ;;
    --threads) wrk_threads=$2; shift ;;
    --backends) backends=$2; shift ;;
    --min-spare) min_spare=$2; shift ;;
    --out) out=$2; shift ;;
    --bin) bin_dir=$2; shift ;;
    --aigw) aigw=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

bench_name=bench-cores
# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh
if [ -n "$out" ]; then
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  : >"$out/bench_cores.log"
  log() { printf '[%s] %s %s\n' "$bench_name" "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/bench_cores.log" >&2; }
fi
started=$SECONDS

need wrk wrk
need nginx nginx-light
need taskset util-linux

if [ -n "$bin_dir" ]; then
  bin=$(cd "$bin_dir" && pwd)
elif [ -n "$bundled" ] && [ -x "$bench_tools/bin/aigw" ] && [ -x "$bench_tools/bin/bare" ]; then
  bin=$bench_tools/bin
else
  log "building release binaries (aigw, bare)"
  cargo build --profile dist --quiet -p aigw-http -p aigw-bench --bins
  bin=$PWD/target/dist
fi
case "${aigw:=$bin/aigw}" in /*) ;; *) aigw=$PWD/$aigw ;; esac
[ -x "$aigw" ] || { log "aigw: $aigw is not an executable"; exit 2; }
[ -x "$bin/bare" ] || { log "bare: $bin/bare is not an executable"; exit 2; }
log "tools: wrk $(command -v wrk), nginx $(command -v nginx), aigw $aigw${bundled:+ (bundle .bench-tools)}"

# --- CPUs ---------------------------------------------------------------------------------------
mapfile -t cpus < <(cpu_list)
budget=${#cpus[@]}
quota=$(cpu_quota)
if [ -n "$quota" ] && [ "$quota" -lt "$budget" ]; then budget=$quota; fi
siblings=$(cat /sys/devices/system/cpu/cpu"${cpus[0]}"/topology/thread_siblings_list 2>/dev/null || echo "?")
log "CPUs: ${#cpus[@]} allowed (in the order used: ${cpus[*]}), cgroup quota ${quota:-none}, so $budget usable; CPU ${cpus[0]}'s hyperthread siblings: $siblings; load now: $(cut -d' ' -f1-3 /proc/loadavg)"
plan=()
for n in $cores_list; do
  if [ "$((budget - n))" -lt "$min_spare" ]; then
    log "N=$n skipped: it leaves $((budget - n)) of $budget CPUs for the load, fewer than --min-spare $min_spare"
  else
    plan+=("$n")
  fi
done
[ ${#plan[@]} -gt 0 ] || { log "no N to run"; exit 1; }
log "running N = ${plan[*]} on ${backends}: ${secs}s per measurement, $rounds round(s), wrk -t$wrk_threads -c$conns"

root=$(mktemp -d)
chmod 755 "$root"
work=$root
pg_db=""
cleanup() {
  local status=$?
  bench_stop_all
  if [ -n "$pg_db" ]; then psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true; fi
  rm -rf "$root"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

declare -A result
mock_workers=3

# run_n N BACKEND: starts everything pinned for N, measures, stops everything.
run_n() {
  local n=$1 backend=$2 url main unmetered nolog r
  work="$root/n$n-$backend"
  mkdir -p "$work"
  chmod 755 "$work"
  srv_cpus=$(IFS=,; echo "${cpus[*]:0:n}")
  load_cpus=$(IFS=,; echo "${cpus[*]:n:budget-n}")
  srv_workers=$n
  log "N=$n $backend: servers on CPUs $srv_cpus, mock upstream and wrk on $load_cpus"
  start_refs
  case "$backend" in
    sqlite) url="sqlite://$work/aigw.db" ;;
    postgres)
      pg_db="aigw_cores_$$_$n"
      psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $pg_db" >/dev/null
      url="postgres://postgres@127.0.0.1:5432/$pg_db" ;;
  esac
  aigw_start "$backend" "$url" true info
  aigw_start "$backend-unmetered" "$url" false info
  aigw_start "$backend-nolog" "$url" true "info,aigw::access=off"
  main=${aigw_base[$backend]} unmetered=${aigw_base[$backend-unmetered]} nolog=${aigw_base[$backend-nolog]}
  aigw_account "$main"
  local me=(-H "authorization: Bearer $token") chat=(-s "$post_lua" -H "authorization: $key")
  local bare_url="http://127.0.0.1:$bare_port/" hop_url="http://127.0.0.1:$hop_port/v1/chat/completions"

  log "N=$n $backend: warm-up (1 s each)"
  wrk_rps "$conns" 1 "$bare_url" >/dev/null
  wrk_rps "$conns" 1 -s "$post_lua" "$hop_url" >/dev/null
  wrk_rps "$conns" 1 "${chat[@]}" "$main/api/v1/ai/chat/completions" >/dev/null
  wrk_rps "$conns" 1 "${chat[@]}" "$unmetered/api/v1/ai/chat/completions" >/dev/null
  wrk_rps "$conns" 1 "${me[@]}" "$main/api/v1/auth/me" >/dev/null
  wrk_rps "$conns" 1 "${me[@]}" "$nolog/api/v1/auth/me" >/dev/null
  echo 5 >"/proc/${aigw_pid[$backend]}/clear_refs" 2>/dev/null || true # VmHWM: the peak from here

  local bare_l="" hop_l="" chat_l="" chat_p99_l="" me_l="" unmetered_l="" unmetered_p99_l="" nolog_l="" i
  for i in $(seq "$rounds"); do
    log "N=$n $backend: round $i/$rounds: bare, hop, chat, /me, chat unmetered, /me nolog (${secs}s each)"
    bare_l+=" $(wrk_rps "$conns" "$secs" "$bare_url")"
    hop_l+=" $(wrk_rps "$conns" "$secs" -s "$post_lua" "$hop_url")"
    r=$(wrk_run "$conns" "$secs" "${chat[@]}" "$main/api/v1/ai/chat/completions")
    chat_l+=" ${r% *}" chat_p99_l+=" ${r#* }"
    me_l+=" $(wrk_rps "$conns" "$secs" "${me[@]}" "$main/api/v1/auth/me")"
    r=$(wrk_run "$conns" "$secs" "${chat[@]}" "$unmetered/api/v1/ai/chat/completions")
    unmetered_l+=" ${r% *}" unmetered_p99_l+=" ${r#* }"
    nolog_l+=" $(wrk_rps "$conns" "$secs" "${me[@]}" "$nolog/api/v1/auth/me")"
  done
  # Concurrency 1 (one connection, no queue): the latency each adds over the mock itself.
  local c1_direct_l="" c1_hop_l="" c1_bare_l="" c1_aigw_l=""
  for i in $(seq "$rounds"); do
    log "N=$n $backend: round $i/$rounds at concurrency 1: direct, hop, bare proxy, aigw chat (${secs}s each)"
    c1_direct_l+=",$(wrk_latency "$secs" -s "$post_lua" "http://127.0.0.1:$mock_port/v1/chat/completions")"
    c1_hop_l+=",$(wrk_latency "$secs" -s "$post_lua" "$hop_url")"
    c1_bare_l+=",$(wrk_latency "$secs" -s "$post_lua" "http://127.0.0.1:$bare_port/v1/chat/completions")"
    c1_aigw_l+=",$(wrk_latency "$secs" "${chat[@]}" "$main/api/v1/ai/chat/completions")"
  done
  local k="$backend,$n"
  result[$k,c1_direct]=$(median_pair "$c1_direct_l") result[$k,c1_hop]=$(median_pair "$c1_hop_l")
  result[$k,c1_bare]=$(median_pair "$c1_bare_l") result[$k,c1_aigw]=$(median_pair "$c1_aigw_l")
  result[$k,bare]=$(echo "$bare_l" | median)
  result[$k,hop]=$(echo "$hop_l" | median)
  result[$k,chat]=$(echo "$chat_l" | median)
  result[$k,chat_p99]=$(echo "$chat_p99_l" | median)
  result[$k,me]=$(echo "$me_l" | median)
  result[$k,unmetered]=$(echo "$unmetered_l" | median)
  result[$k,unmetered_p99]=$(echo "$unmetered_p99_l" | median)
  result[$k,nolog]=$(echo "$nolog_l" | median)
  result[$k,rss_peak]=$(( $(rss_kib "${aigw_pid[$backend]}" VmHWM) / 1024 ))
  result[$k,chat_hop]=$(ratio "${result[$k,chat]}" "${result[$k,hop]}")
  access_lines_check "$backend"
  log "N=$n $backend: bare ${result[$k,bare]}, hop ${result[$k,hop]}, chat ${result[$k,chat]}, /me ${result[$k,me]}, unmetered ${result[$k,unmetered]}, nolog ${result[$k,nolog]} req/s; chat ÷ hop ${result[$k,chat_hop]}"

  bench_stop_all
  if [ -n "$pg_db" ]; then
    psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null
    pg_db=""
  fi
  rm -rf "$work"
}

ran_backends=()
for backend in $backends; do
  case "$backend" in
    sqlite) ;;
    postgres)
      if ! command -v psql >/dev/null || ! psql -q -h 127.0.0.1 -U postgres -c 'SELECT 1' >/dev/null 2>&1; then
        log "PostgreSQL not reachable on 127.0.0.1:5432 as postgres: skipped"; continue
      fi ;;
    *) log "--backends: sqlite or postgres, not $backend"; exit 2 ;;
  esac
  for n in "${plan[@]}"; do run_n "$n" "$backend"; done
  ran_backends+=("$backend")
done

# --- report -------------------------------------------------------------------------------------
int() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }
verdict() { # value, comparison (">=" or "<="), bound
  awk -v v="$1" -v op="$2" -v b="$3" 'BEGIN { if (v == "n/a") print "n/a"; else if ((op == ">=" && v + 0 >= b + 0) || (op == "<=" && v + 0 <= b + 0)) print "ok"; else print "MISSED" }'
}
report() {
  local backend first last k n a b
  echo "aigw scaling with cores: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs allowed, $budget usable ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo); hyperthread siblings of CPU ${cpus[0]}: $siblings), secs=$secs rounds=$rounds wrk -t$wrk_threads -c$conns, aigw=${aigw#"$PWD"/}"
  for backend in "${ran_backends[@]}"; do
    echo
    echo "### $backend (req/s)"
    echo
    echo "| cores | bare actix GET | nginx proxy hop | aigw API-key chat | aigw GET /auth/me | chat ÷ hop | chat unmetered | me nolog |"
    echo "|---|---|---|---|---|---|---|---|"
    for n in "${plan[@]}"; do
      k="$backend,$n"
      echo "| $n | $(int "${result[$k,bare]}") | $(int "${result[$k,hop]}") | $(int "${result[$k,chat]}") | $(int "${result[$k,me]}") | ${result[$k,chat_hop]} | $(int "${result[$k,unmetered]}") | $(int "${result[$k,nolog]}") |"
    done
    echo
    echo "| cores | chat metered ÷ unmetered (>= 0.9) | chat p99 µs metered / unmetered | p99 ratio (<= 1.5) | /auth/me log on ÷ off (>= 0.9) | aigw peak RSS MiB (<= 40) |"
    echo "|---|---|---|---|---|---|"
    for n in "${plan[@]}"; do
      k="$backend,$n"
      a=$(ratio "${result[$k,chat]}" "${result[$k,unmetered]}")
      b=$(ratio "${result[$k,chat_p99]}" "${result[$k,unmetered_p99]}")
      echo "| $n | $a $(verdict "$a" ">=" 0.9) | ${result[$k,chat_p99]} / ${result[$k,unmetered_p99]} | $b $(verdict "$b" "<=" 1.5) | $(ratio "${result[$k,me]}" "${result[$k,nolog]}") $(verdict "$(ratio "${result[$k,me]}" "${result[$k,nolog]}")" ">=" 0.9) | ${result[$k,rss_peak]} $(verdict "${result[$k,rss_peak]}" "<=" 40) |"
    done
    echo
    echo "| cores | c1 p50 p99 µs: direct / hop / bare proxy / aigw chat | added ÷ the hop's, p50 / p99: bare proxy | aigw (<= 2) |"
    echo "|---|---|---|---|"
    for n in "${plan[@]}"; do
      k="$backend,$n"
      echo "| $n | ${result[$k,c1_direct]} / ${result[$k,c1_hop]} / ${result[$k,c1_bare]} / ${result[$k,c1_aigw]} | $(added_ratios "${result[$k,c1_direct]}" "${result[$k,c1_hop]}" "${result[$k,c1_bare]}") | $(added_ratios "${result[$k,c1_direct]}" "${result[$k,c1_hop]}" "${result[$k,c1_aigw]}") |"
    done
    first=${plan[0]} last=${plan[-1]}
    echo
    a=${result[$backend,$last,chat_hop]} b=${result[$backend,$first,chat_hop]}
    if [ "$last" = 8 ]; then
      echo "- chat ÷ hop at 8 cores: $a (target >= 0.4): $(verdict "$a" ">=" 0.4)"
    else
      echo "- chat ÷ hop at 8 cores: not run (largest N run: $last, chat ÷ hop $a)"
    fi
    if [ "$first" != "$last" ]; then
      echo "- chat ÷ hop at $last cores ($a) vs at $first ($b) - 0.1: $(verdict "$a" ">=" "$(awk -v b="$b" 'BEGIN { print b - 0.1 }')")"
    fi
  done
}
echo >&2
if [ -n "$out" ]; then report | tee "$out/bench_cores.md"; else report; fi
log "done in $((SECONDS - started)) s"
