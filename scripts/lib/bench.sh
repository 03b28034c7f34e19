# Sourced by scripts/bench.sh and scripts/bench_cores.sh: the pieces both benchmarks are made
# of. Tools (wrk, nginx, taskset, and the release binaries) come from .bench-tools/ when
# scripts/bench_bundle.sh made it, else from PATH. The servers: `bare`, the nginx mock OpenAI
# upstream, the nginx hop, aigw instances (each on its own data_dir, all on one database),
# optionally pinned to CPU sets. HTTP set-up calls go through bash's /dev/tcp, no curl and no
# python3. The caller sets `work` (a temporary folder, mode 755: nginx's workers read it),
# starts servers with the functions below and calls `bench_stop_all` from its EXIT trap.
# shellcheck shell=bash

bench_name=${bench_name:-bench}
log() { printf '\033[1m[%s]\033[0m %s\n' "$bench_name" "$*" >&2; }

# --- tools --------------------------------------------------------------------------------------
# .bench-tools/bin holds wrappers that run each tool with the bundle's own dynamic loader and
# libraries (nothing of the host's but the kernel), so it goes first on PATH; LD_LIBRARY_PATH
# is left alone (the host's own tools keep the host's libraries).
bench_tools=$PWD/.bench-tools
bundled=""
# (A copy that lost the execute bits gets them back.)
if [ -d "$bench_tools/bin" ]; then chmod a+x "$bench_tools"/bin/* "$bench_tools"/exe/* "$bench_tools"/lib/ld.so 2>/dev/null || true; fi
if [ -x "$bench_tools/bin/wrk" ] && [ -x "$bench_tools/bin/nginx" ]; then
  bundled=1
  PATH="$bench_tools/bin:$PATH"
fi
PATH="$PATH:/usr/sbin:/sbin"

need() { # command, Debian package: installed with apt-get when missing, root and no bundle
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ -z "$bundled" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing $2"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null ||
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }
  fi
  command -v "$1" >/dev/null 2>&1 || { log "$1 not found: apt-get install $2, or scripts/bench_bundle.sh"; exit 1; }
}

# --- processes ----------------------------------------------------------------------------------
pids=()
spawn() { "$@" & pids+=($!); } # a command in the background, stopped by bench_stop_all
bench_stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
# pin CPUS COMMAND...: execs COMMAND on the CPU list CPUS (taskset -c syntax), or anywhere
# when empty. It replaces the shell it runs in: call it in the background or in $(...), so
# that the process id is the command's own (signals, /proc/PID/status).
pin() {
  local cpus=$1; shift
  if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}

# --- small helpers ------------------------------------------------------------------------------
# Ports from 10000-29999 (below Linux's ephemeral range, where wrk's own sockets live), each
# checked free and never handed out twice in one run.
port_next=$((10000 + RANDOM % 20000))
alloc_port() { # VAR
  while (exec 3<>"/dev/tcp/127.0.0.1/$port_next") 2>/dev/null; do port_next=$((port_next + 1)); done
  printf -v "$1" %s "$port_next"
  port_next=$((port_next + 1))
}

# http METHOD URL [BODY [HEADER...]]: one HTTP/1.1 request over /dev/tcp (connection: close);
# prints the answer's body and fails unless the status is 2xx (sets http_status, empty when
# nothing answered). Loopback set-up calls only.
http() {
  local LC_ALL=C method=$1 url=$2 body=${3:-} fd resp head out n h hp path
  http_status=""
  shift 2; [ $# -gt 0 ] && shift
  hp=${url#http://}
  case "$hp" in */*) path=/${hp#*/}; hp=${hp%%/*} ;; *) path=/ ;; esac
  exec {fd}<>"/dev/tcp/${hp%:*}/${hp##*:}" || return 1
  {
    printf '%s %s HTTP/1.1\r\nhost: %s\r\nconnection: close\r\n' "$method" "$path" "$hp"
    if [ -n "$body" ]; then printf 'content-type: application/json\r\ncontent-length: %d\r\n' "${#body}"; fi
    for h in "$@"; do printf '%s\r\n' "$h"; done
    printf '\r\n%s' "$body"
  } >&"$fd"
  IFS= read -r -d '' -t 30 -u "$fd" resp || true
  exec {fd}>&-
  head=${resp%%$'\r\n\r\n'*}
  out=${resp#*$'\r\n\r\n'}
  http_status=${head#HTTP/1.? }
  http_status=${http_status%% *}
  shopt -s nocasematch
  if [[ $head == *$'\r\n'transfer-encoding:*chunked* ]]; then
    body=$out out=""
    while [ -n "$body" ]; do
      n=${body%%$'\r\n'*}
      body=${body#*$'\r\n'}
      n=$((16#${n%%;*}))
      [ "$n" = 0 ] && break
      out+=${body:0:n}
      body=${body:n+2}
    done
  fi
  shopt -u nocasematch
  printf '%s' "$out"
  case "$http_status" in 2??) return 0 ;; *) log "$method $url: ${http_status:-no answer}"; return 1 ;; esac
}
wait_http() { # URL: until anything answers (bounded: 10 s)
  local i
  for i in $(seq 200); do
    http GET "$1" >/dev/null 2>&1 || true
    [ -n "$http_status" ] && return 0 # any status: the nginx hop answers / with a 404
    sleep 0.05
  done
  log "$1 did not answer"; exit 1
}
json_str() { grep -o "\"$1\":\"[^\"]*\"" | head -1 | cut -d'"' -f4; } # the first string field KEY of compact JSON
rss_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'; }
# (A ÷ B) ÷ (C ÷ D), two decimals: one request's ratio to its reference over another's.
ratio_of_ratios() { awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" 'BEGIN { if (b * c + 0 == 0) print "n/a"; else printf "%.2f\n", (a / b) / (c / d) }'; }

# wrk_run CONNS SECS WRK_ARGS...: prints "req/s p99_us" (wrk -t$wrk_threads --latency, on the
# CPUs $load_cpus). A run with answers other than 2xx/3xx fails the benchmark (their rate would
# be measured instead).
wrk_threads=${wrk_threads:-1}
load_cpus=${load_cpus:-}
wrk_run() {
  local c=$1 s=$2 out; shift 2
  out=$(pin "$load_cpus" wrk -t"$wrk_threads" -c"$c" -d"${s}s" --latency "$@")
  if grep -q 'Non-2xx' <<<"$out"; then log "wrk $*: $(grep 'Non-2xx' <<<"$out")"; exit 1; fi
  if grep -q 'Socket errors' <<<"$out"; then log "wrk $*: $(grep 'Socket errors' <<<"$out")"; fi
  awk '/^Requests\/sec/ { rps = $2 }
    $1 == "99%" { v = $2; m = 1e6
      if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000; else if (v ~ /m$/) m = 6e7
      sub(/[a-z]+$/, "", v); p99 = int(v * m) }
    END { print rps, p99 }' <<<"$out"
}
wrk_rps() { wrk_run "$@" | cut -d' ' -f1; }

# wrk_latency SECS ARGS...: one connection, one request at a time (no queueing anywhere), for
# SECS seconds: prints "p50_us p99_us" of wrk's latency distribution.
wrk_latency() {
  local s=$1 out; shift
  out=$(pin "$load_cpus" wrk -t1 -c1 -d"${s}s" --latency "$@")
  if grep -q 'Non-2xx' <<<"$out"; then log "wrk $*: $(grep 'Non-2xx' <<<"$out")"; exit 1; fi
  awk 'function us(v,  m) { m = 1e6
      if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000; else if (v ~ /m$/) m = 6e7
      sub(/[a-z]+$/, "", v); return int(v * m) }
    $1 == "50%" { p50 = us($2) } $1 == "99%" { p99 = us($2) }
    END { print p50, p99 }' <<<"$out"
}

# added_ratios "DIRECT_P50 DIRECT_P99" "HOP_P50 HOP_P99" "VIA_P50 VIA_P99": the latency a server
# adds over the upstream itself, divided by what the nginx hop adds: "p50 / p99" ("n/a" where
# the hop adds nothing: at concurrency 1 the CPUs' wake-up latency can make the direct call
# the slower one).
added_ratios() {
  local d=($1) h=($2) v=($3) p50=n/a p99=n/a
  [ $((h[0] - d[0])) -gt 0 ] && p50=$(ratio $((v[0] - d[0])) $((h[0] - d[0])))
  [ $((h[1] - d[1])) -gt 0 ] && p99=$(ratio $((v[1] - d[1])) $((h[1] - d[1])))
  echo "$p50 / $p99"
}
# over "HOP_P50 HOP_P99" "VIA_P50 VIA_P99": µs a server adds over the nginx hop, "p50 p99".
over() { local h=($1) v=($2); echo "$((v[0] - h[0])) $((v[1] - h[1]))"; }
# median_pair ",P50 P99,P50 P99,...": the median of each column, "P50 P99".
median_pair() {
  local p50 p99
  p50=$(tr ',' '\n' <<<"$1" | awk 'NF { print $1 }' | tr '\n' ' ' | median)
  p99=$(tr ',' '\n' <<<"$1" | awk 'NF { print $2 }' | tr '\n' ' ' | median)
  echo "${p50%.*} ${p99%.*}"
}

# rate: prints "p50_us p99_us" (and says so loudly on errors); $bin/rate, $secs seconds.
rate_p() {
  local out
  out=$(pin "$load_cpus" "$bin/rate" "$@" --secs "$secs")
  case "$out" in *" errors=0 "*) ;; *) log "rate: $out" ;; esac
  echo "$out" | sed -E 's/.*p50_us=([0-9]+).*p99_us=([0-9]+).*/\1 \2/'
}

# A wrk script that POSTs a JSON body. Args: file, body.
post_script() {
  printf 'wrk.method = "POST"\nwrk.headers["content-type"] = "application/json"\nwrk.body = %s\n' "'$2'" >"$1"
}

# --- the requests -------------------------------------------------------------------------------
chat_body='{"model":"mock-model","messages":[{"role":"user","content":"Say hello to the benchmark in one short sentence."}]}'
completion='{"id":"chatcmpl-bench","object":"chat.completion","created":1763683200,"model":"mock-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello, benchmark."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}'
stream_body='{"model":"mock-stream","stream":true,"messages":[{"role":"user","content":"Say hello to the benchmark in one short sentence."}]}'
# The streamed answer: OpenAI's chunks as one body (nginx turns each \n into a newline).
chunk='data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1763683200,"model":"mock-stream","choices":'
events="$chunk[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello,\"},\"finish_reason\":null}]}\n\n"
events+="$chunk[{\"index\":0,\"delta\":{\"content\":\" benchmark.\"},\"finish_reason\":null}]}\n\n"
events+="$chunk[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
events+="$chunk[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16}}\n\n"
events+='data: [DONE]\n\n'

# The same chat, to a model with two healthy deployments (mock-pair) and to one whose second
# deployment is down (mock-half: nothing listens on its port).
pair_body=${chat_body/mock-model/mock-pair}
half_body=${chat_body/mock-model/mock-half}

embed_body='{"model":"mock-embed","input":"Say hello to the benchmark in one short sentence."}'
embedding='{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023,-0.0093,0.0158,-0.0041,0.0072,-0.0115,0.0034,0.0087]}],"model":"mock-embed","usage":{"prompt_tokens":12,"total_tokens":12}}'

messages_body='{"model":"mock-claude","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Say hello to the benchmark in one short sentence."}]}'
# Anthropic's streamed message: its events as one body.
message_events='event: message_start\ndata: {"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"mock-claude","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n'
message_events+='event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
message_events+='event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello,"}}\n\n'
message_events+='event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" benchmark."}}\n\n'
message_events+='event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
message_events+='event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4}}\n\n'
message_events+='event: message_stop\ndata: {"type":"message_stop"}\n\n'

# --- references: bare actix, nginx mock upstream, nginx hop ------------------------------------
# start_refs: starts the three and sets bare_port, mock_port, hop_port, post_lua, stream_lua,
# embed_lua, messages_lua, pair_lua, and down_port (nothing listens there).
# Server under test (bare, the hop) on $srv_cpus with $srv_workers workers (empty: all CPUs, as
# many workers); the mock upstream on $load_cpus with $mock_workers.
srv_cpus=${srv_cpus:-} srv_workers=${srv_workers:-} mock_workers=${mock_workers:-}
nginx_conf() { # name, worker_processes, CPUs, server block
  mkdir -p "$work/$1"
  # As root, nginx's workers would switch to nobody:nogroup, which a bare machine may lack.
  local user=""
  [ "$(id -u)" != 0 ] || user="user root root;"
  cat >"$work/$1/nginx.conf" <<NGINX
$user
worker_processes $2;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/$1;
  proxy_temp_path $work/$1;
  fastcgi_temp_path $work/$1;
  uwsgi_temp_path $work/$1;
  scgi_temp_path $work/$1;
  keepalive_requests 1000000;
  $4
}
NGINX
  spawn pin "$3" nginx -e "$work/$1/error.log" -c "$work/$1/nginx.conf" -g 'daemon off;'
}
start_refs() {
  alloc_port bare_port; alloc_port mock_port; alloc_port hop_port
  # bare takes its worker count as a second argument (0: actix's default, one per CPU it may
  # run on, the same under taskset), and the mock upstream its proxy route forwards to.
  spawn pin "$srv_cpus" "$bin/bare" "127.0.0.1:$bare_port" "${srv_workers:-0}" "http://127.0.0.1:$mock_port" >"$work/bare.log" 2>&1
  nginx_conf mock "${mock_workers:-auto}" "$load_cpus" "server { listen 127.0.0.1:$mock_port; location = /v1/chat/completions { default_type application/json; return 200 '$completion'; } location = /stream/v1/chat/completions { default_type text/event-stream; return 200 '$events'; } location = /v1/embeddings { default_type application/json; return 200 '$embedding'; } location = /anthropic/v1/messages { default_type text/event-stream; return 200 '$message_events'; } }"
  nginx_conf hop "${srv_workers:-auto}" "$srv_cpus" "upstream mock { server 127.0.0.1:$mock_port; keepalive 64; } server { listen 127.0.0.1:$hop_port; location / { proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
  wait_http "http://127.0.0.1:$bare_port/"
  wait_http "http://127.0.0.1:$mock_port/"
  wait_http "http://127.0.0.1:$hop_port/"
  post_lua="$work/post.lua" stream_lua="$work/stream.lua" embed_lua="$work/embed.lua"
  post_script "$post_lua" "$chat_body"
  post_script "$stream_lua" "$stream_body"
  post_script "$embed_lua" "$embed_body"
  messages_lua="$work/messages.lua"
  post_script "$messages_lua" "$messages_body"
  pair_lua="$work/pair.lua"
  post_script "$pair_lua" "$pair_body"
  # A port nothing listens on: mock-half's second deployment (connections refused).
  alloc_port down_port
}

# --- aigw ---------------------------------------------------------------------------------------
# aigw_start NAME DB_URL USAGE LOG_LEVEL: an aigw ($aigw) on its own port and data_dir
# ($work/aigw-NAME), database DB_URL (instances may share one), usage.enabled = USAGE,
# log.level = LOG_LEVEL (JSON lines; "info" writes one access line per request,
# "info,aigw::access=off" none), on $srv_cpus with server.workers = $srv_workers (empty: the
# default, one per CPU). RUST_LOG is unset for it (it would override log.level). Sets
# aigw_pid[NAME] and aigw_base[NAME] once it answers /healthz.
declare -A aigw_pid aigw_base
key_counters=${key_counters:-database}
aigw_start() {
  local name=$1 url=$2 usage=$3 level=$4 dir="$work/aigw-$1" port
  mkdir -p "$dir"
  alloc_port port
  cat >"$dir/aigw.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
data_dir = "$dir"
${srv_workers:+workers = $srv_workers}
[database]
url = "$url"
[auth]
jwt_secret = "bench-secret-bench-secret-bench-secret-0123"
[log]
# As in production: one JSON access-log line per request, metrics recorded.
level = "$level"
format = "json"
[usage]
enabled = $usage
[rate_limit]
enabled = false
# Used only with key_counters = "redis": keys of this run's own.
redis_key_prefix = "aigw-bench:$$:$name:"
[gateway]
key_counters = "$key_counters"
[[providers]]
name = "mock"
base_url = "http://127.0.0.1:$mock_port/v1"
models = ["mock-model", "mock-embed", "mock-pair", "mock-half"]
prices = { "mock-model" = { input_per_million = 0.15, output_per_million = 0.60 }, "mock-embed" = { input_per_million = 0.02, output_per_million = 0.0 }, "mock-pair" = { input_per_million = 0.15, output_per_million = 0.60 }, "mock-half" = { input_per_million = 0.15, output_per_million = 0.60 } }
# mock-pair's second deployment: the same upstream.
[[providers]]
name = "mock-twin"
base_url = "http://127.0.0.1:$mock_port/v1"
models = ["mock-pair"]
prices = { "mock-pair" = { input_per_million = 0.15, output_per_million = 0.60 } }
# mock-half's second deployment: down (connection refused).
[[providers]]
name = "mock-down"
base_url = "http://127.0.0.1:$down_port/v1"
models = ["mock-half"]
prices = { "mock-half" = { input_per_million = 0.15, output_per_million = 0.60 } }
[[providers]]
name = "mock-anthropic"
kind = "anthropic"
base_url = "http://127.0.0.1:$mock_port/anthropic"
models = ["mock-claude"]
prices = { "mock-claude" = { input_per_million = 3.0, output_per_million = 15.0 } }
[[providers]]
name = "mock-stream"
base_url = "http://127.0.0.1:$mock_port/stream/v1"
models = ["mock-stream"]
prices = { "mock-stream" = { input_per_million = 0.15, output_per_million = 0.60 } }
TOML
  spawn pin "$srv_cpus" env -u RUST_LOG "$aigw" --config "$dir/aigw.toml" >"$dir/server.log" 2>&1
  aigw_pid[$name]=${pids[-1]}
  aigw_base[$name]="http://127.0.0.1:$port"
  local i
  for i in $(seq 200); do
    http GET "${aigw_base[$name]}/healthz" >/dev/null 2>&1 && return 0
    kill -0 "${aigw_pid[$name]}" 2>/dev/null || break
    sleep 0.05
  done
  log "aigw $name did not start:"; tail -5 "$dir/server.log" >&2; exit 1
}

aigw_stop() { # NAME
  kill -TERM "${aigw_pid[$1]}" 2>/dev/null || true
  wait "${aigw_pid[$1]}" 2>/dev/null || true
}
# access_lines NAME: the access-log lines aigw NAME wrote so far.
access_lines() { grep -c '"message":"access"' "$work/aigw-$1/server.log" || true; }
# access_lines_check NAME: says so when NAME wrote no access line or NAME-nolog wrote some.
access_lines_check() {
  local on off
  on=$(access_lines "$1") off=$(access_lines "$1-nolog")
  log "access-log lines: $on with the log on, $off with it off"
  if [ "$on" = 0 ] || [ "$off" != 0 ]; then log "WARNING: the access log was not on and off as meant"; fi
}

# aigw_account BASE: registers bench@example.com, creates an API key (ai_gateway, read) and
# makes one chat call with it. Sets token, user_id, key.
aigw_account() {
  local base=$1 reg
  reg=$(http POST "$base/api/v1/auth/register" '{"email":"bench@example.com","password":"a long bench passphrase"}')
  token=$(json_str token <<<"$reg")
  user_id=$(json_str id <<<"$reg")
  key=$(aigw_key "$base" '{"name":"bench","permissions":["ai_gateway","read"]}')
  http POST "$base/api/v1/ai/chat/completions" "$chat_body" "authorization: $key" >/dev/null
}
aigw_key() { # BASE, the API-key request body: prints the new key
  http POST "$1/api/v1/auth/api-keys" "$2" "authorization: Bearer $token" | json_str key
}

# --- CPUs ---------------------------------------------------------------------------------------
# cpu_list: the CPUs this process may run on (its affinity, e.g. "0-7,16-23"), one per line,
# hyperthread siblings next to each other (by their first sibling), so that the first N CPUs,
# N even, are whole cores, shared with nothing taken from the rest.
cpu_list() {
  local part c first
  for part in $(awk '/^Cpus_allowed_list:/ { gsub(",", " ", $2); print $2 }' /proc/self/status); do
    case "$part" in *-*) seq "${part%-*}" "${part#*-}" ;; *) echo "$part" ;; esac
  done | while read -r c; do
    first=$(cat "/sys/devices/system/cpu/cpu$c/topology/thread_siblings_list" 2>/dev/null || echo "$c")
    echo "${first%%[,-]*} $c"
  done | sort -n -k1,1 -k2,2 | cut -d' ' -f2
}
# cpu_quota: whole CPUs allowed by the cgroup's cpu.max (cgroup v2), or nothing when unlimited.
cpu_quota() {
  local f q p
  f=/sys/fs/cgroup$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup 2>/dev/null)/cpu.max
  [ -r "$f" ] || f=/sys/fs/cgroup/cpu.max
  [ -r "$f" ] || return 0
  read -r q p <"$f"
  [ "$q" = max ] || echo $(((q + p - 1) / p))
}
