#!/usr/bin/env bash
# End-to-end check with the official OpenAI Python SDK (an OpenAI-compatible gateway must pass
# it), on SQLite and on PostgreSQL (a fresh database aigw_sdk_<random> on
# $AIGW_TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres, dropped after):
#
# - chat: the SDK, pointed at aigw with an aigw API key, gets identical plain and streaming
#   completions (with and without stream_options.include_usage) from the built-in `echo` model
#   and from a configured upstream (docs/examples/fake_upstream.py), and a 404 for an unknown
#   model (docs/examples/openai_sdk_check.py);
# - the other endpoints: embeddings.create (string and list input), responses.create plain and
#   stream=True, models.retrieve (docs/examples/openai_sdk_dialects.py);
# - Anthropic: the official Anthropic Python SDK with its base URL at /api/v1/ai/anthropic and
#   the aigw key as its api_key (sent as x-api-key): messages.create, messages.stream,
#   messages.count_tokens, and the SDK's NotFoundError for an unknown model
#   (docs/examples/anthropic_sdk_check.py);
# - then the usage ledger holds one record per call, each with the fake upstream's exact token
#   counts and the configured prices (cached input and cache writes at their own prices).
#
# Loopback only.
#
#   scripts/sdk_check.sh [path to the aigw binary (default target/debug/aigw)]
#
# Needs python3 with venv; installs `openai` and `anthropic` from PyPI into .venv-sdk. When PyPI cannot be
# reached the check is skipped with a notice (exit 0); any failure of the check itself fails.
# Without psql or a usable PostgreSQL the PostgreSQL half is skipped loudly (a failure with
# CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/aigw}
log() { printf '\033[1m[sdk_check]\033[0m %s\n' "$*" >&2; }
ci() { [ "${CI:-}" = "true" ]; }
[ -x "$bin" ] || cargo build --quiet --bin aigw
if ! python3 -m venv .venv-sdk >/dev/null 2>&1 || ! .venv-sdk/bin/pip install -q openai anthropic >/dev/null 2>&1; then
  log "SKIPPED: could not install the openai and anthropic packages from PyPI"
  exit 0
fi
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up_port=$(free_port)
python3 docs/examples/fake_upstream.py "$up_port" >"$work/upstream.log" 2>&1 &
up_pid=$!
pid=""
pg_admin_url=${AIGW_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
pg_db="aigw_sdk_$(python3 -c 'import secrets; print(secrets.token_hex(6))')"
pg_created=""
cleanup() {
  local status=$?
  kill -TERM "$up_pid" ${pid:+"$pid"} 2>/dev/null || true
  wait "$up_pid" ${pid:+"$pid"} 2>/dev/null || true
  if [ -n "$pg_created" ]; then
    psql -q "$pg_admin_url" -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || log "could not drop $pg_db"
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# $1: backend name; $2: database URL (empty: SQLite in the data directory).
check_backend() {
  local name=$1 database_url=$2 port base
  port=$(free_port)
  mkdir -p "$work/$name"
  cat >"$work/$name/aigw.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
data_dir = "$work/$name/data"
[rate_limit]
enabled = false
[usage]
request_records = "database"
flush_interval_ms = 50
[[providers]]
name = "fake"
kind = "openai"
base_url = "http://127.0.0.1:$up_port"
api_key = "sk-provider-secret"
models = ["fake-model", "fake-bad-request", "fake-embed", "fake-resp"]
prices = { "fake-embed" = { input_per_million = 100.0, output_per_million = 0.0 }, "fake-resp" = { input_per_million = 1000.0, output_per_million = 2000.0, cached_input_per_million = 100.0 } }
[[providers]]
name = "fake-anthropic"
kind = "anthropic"
base_url = "http://127.0.0.1:$up_port"
api_key = "sk-ant-provider-secret"
models = ["fake-claude"]
prices = { "fake-claude" = { input_per_million = 3.0, output_per_million = 15.0, cached_input_per_million = 0.3, cache_write_per_million = 3.75 } }
TOML
  AIGW__DATABASE__URL=${database_url:-sqlite://$work/$name/data/aigw.db} \
    "$bin" --config "$work/$name/aigw.toml" >"$work/$name/aigw.log" 2>&1 &
  pid=$!
  base="http://127.0.0.1:$port"
  for _ in $(seq 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
  json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
  local token key out records
  token=$(curl -sf "$base/api/v1/auth/register" -H 'content-type: application/json' \
    -d '{"email":"sdk@example.com","password":"a long sdk passphrase"}' | json '["data"]["token"]')
  key=$(curl -sf "$base/api/v1/auth/api-keys" -H "authorization: Bearer $token" \
    -H 'content-type: application/json' -d '{"name":"sdk","permissions":["ai_gateway"]}' | json '["data"]["key"]')
  out=$(AIGW_BASE_URL="$base/api/v1/ai" AIGW_API_KEY="$key" AIGW_REJECT_MODEL=fake-bad-request \
    .venv-sdk/bin/python docs/examples/openai_sdk_check.py echo fake-model)
  printf '%s\n' "$out"
  grep -q "\[echo\] streaming: 'hello from the OpenAI SDK'" <<<"$out"
  grep -q "\[fake-model\] plain:     'fake-upstream says hi (auth: Bearer sk-provider-secret)'" <<<"$out"
  grep -q "upstream 400: BadRequestError status=400 code='upstream_rejected'" <<<"$out"
  grep -q "\[fake-model\] streaming+usage: 'fake-upstream says hi (auth: Bearer sk-provider-secret)' (usage: prompt_tokens=1, completion_tokens=4)" <<<"$out"
  grep -q '^OK$' <<<"$out"
  out=$(AIGW_BASE_URL="$base/api/v1/ai" AIGW_API_KEY="$key" \
    .venv-sdk/bin/python docs/examples/openai_sdk_dialects.py fake-embed fake-resp)
  printf '%s\n' "$out"
  grep -q "\[fake-resp\] responses(stream): 'fake-upstream responds'" <<<"$out"
  grep -q "models.retrieve(fake-embed): id=fake-embed endpoints=\['chat', 'embeddings', 'responses'\]" <<<"$out"
  grep -q '^OK$' <<<"$out"
  out=$(AIGW_BASE_URL="$base/api/v1/ai/anthropic" AIGW_API_KEY="$key" \
    .venv-sdk/bin/python docs/examples/anthropic_sdk_check.py fake-claude)
  printf '%s\n' "$out"
  grep -q "\[fake-claude\] create: 'fake-upstream says hi (x-api-key: sk-ant-provider-secret)'" <<<"$out"
  grep -q "\[fake-claude\] stream: 'fake-upstream says hi (x-api-key: sk-ant-provider-secret)' (usage: output_tokens=6)" <<<"$out"
  grep -q "\[fake-claude\] count_tokens: 9" <<<"$out"
  grep -q "unknown model: NotFoundError status=404" <<<"$out"
  grep -q '^OK$' <<<"$out"
  # Chat: six completions (two models, plain + two streams each) and the upstream's 400
  # (outcome upstream_error); embeddings: two; responses: two; messages: two (count_tokens is
  # not metered). Thirteen records, each once, with the fake's exact counts and the
  # configured prices.
  records=0
  for _ in $(seq 100); do
    curl -sf "$base/api/v1/usage/requests?limit=200" -H "authorization: Bearer $token" >"$work/$name/records.json"
    records=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["data"]["requests"]))' "$work/$name/records.json")
    [ "$records" -ge 13 ] && break
    sleep 0.1
  done
  [ "$records" = 13 ] || { log "FAIL ($name): expected 13 usage records, found $records"; exit 1; }
  python3 - "$work/$name/records.json" <<'PY'
import json, sys
records = json.load(open(sys.argv[1]))["data"]["requests"]
def of(model):
    return [r for r in records if r["model"] == model]
embed = sorted(of("fake-embed"), key=lambda r: r["prompt_tokens"])
# "hello embeddings" (16 bytes), then "first" + "second text" (16 bytes): one token per byte.
assert [r["prompt_tokens"] for r in embed] == [16, 16], embed
for r in embed:
    assert r["completion_tokens"] == 0 and not r["estimated"], r
    assert abs(r["cost_usd"] - 16 * 100.0 / 1e6) < 1e-9, r
resp = of("fake-resp")
assert len(resp) == 2, resp
for r in resp:
    # 11 input tokens, 3 of them cached; 7 output tokens.
    assert (r["prompt_tokens"], r["completion_tokens"]) == (11, 7) and not r["estimated"], r
    expected = (8 * 1000.0 + 3 * 100.0 + 7 * 2000.0) / 1e6
    assert abs(r["cost_usd"] - expected) < 1e-9, (r, expected)
claude = of("fake-claude")
assert len(claude) == 2, claude
for r in claude:
    # 5 input tokens, 2 written to the cache, 4 read from it: 11 prompt tokens; 6 output.
    assert (r["prompt_tokens"], r["completion_tokens"]) == (11, 6) and not r["estimated"], r
    # 113.7 µUSD, rounded once to a whole µUSD as the ledger does.
    expected = round(5 * 3.0 + 4 * 0.3 + 2 * 3.75 + 6 * 15.0) / 1e6
    assert abs(r["cost_usd"] - expected) < 1e-9, (r, expected)
print("records: exact counts and prices")
PY
  log "$name: OpenAI SDK chat (echo and upstream, plain and streaming, with and without usage, upstream 400), embeddings, responses (plain and streamed), models.retrieve; Anthropic SDK create, stream, count_tokens, unknown model: OK; 13 usage records with exact counts and prices"
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}

check_backend sqlite ""
if ! command -v psql >/dev/null 2>&1; then
  if ci; then log "FAIL: CI=true but psql (PostgreSQL client) is missing"; exit 1; fi
  log "!!! psql not found: the PostgreSQL half of the SDK check is SKIPPED !!!"
elif ! psql -q "$pg_admin_url" -c "CREATE DATABASE $pg_db" >/dev/null 2>"$work/pg.err"; then
  if ci; then log "FAIL: CI=true but no database could be created on the test PostgreSQL: $(head -n 1 "$work/pg.err")"; exit 1; fi
  log "!!! the test PostgreSQL is unusable ($(head -n 1 "$work/pg.err")): the PostgreSQL half is SKIPPED !!!"
else
  pg_created=1
  pg_url=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$pg_admin_url" "$pg_db")
  check_backend postgres "$pg_url"
fi
