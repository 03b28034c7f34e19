#!/usr/bin/env bash
# End-to-end check with the official OpenAI Python SDK (an OpenAI-compatible gateway must pass it): the SDK, pointed
# at aigw with an aigw API key, gets identical plain and streaming completions (with and
# without stream_options.include_usage) from the built-in `echo` model and from a configured
# upstream (docs/examples/fake_upstream.py), and a 404 for an unknown model; then the usage
# ledger holds one record per completion. Loopback only.
#
#   scripts/sdk_check.sh [path to the aigw binary (default target/debug/aigw)]
#
# Needs python3 with venv; installs `openai` from PyPI into .venv-sdk. When PyPI cannot be
# reached the check is skipped with a notice (exit 0); any failure of the check itself fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/aigw}
log() { printf '\033[1m[sdk_check]\033[0m %s\n' "$*" >&2; }
[ -x "$bin" ] || cargo build --quiet --bin aigw
if ! python3 -m venv .venv-sdk >/dev/null 2>&1 || ! .venv-sdk/bin/pip install -q openai >/dev/null 2>&1; then
  log "SKIPPED: could not install the openai package from PyPI"
  exit 0
fi
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up_port=$(free_port)
port=$(free_port)
python3 docs/examples/fake_upstream.py "$up_port" >"$work/upstream.log" 2>&1 &
up_pid=$!
cat >"$work/aigw.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
data_dir = "$work/data"
[rate_limit]
enabled = false
[usage]
request_records = "database"
[[providers]]
name = "fake"
kind = "openai"
base_url = "http://127.0.0.1:$up_port"
api_key = "sk-provider-secret"
models = ["fake-model", "fake-bad-request"]
TOML
"$bin" --config "$work/aigw.toml" >"$work/aigw.log" 2>&1 &
pid=$!
cleanup() {
  local status=$?
  kill -TERM "$pid" "$up_pid" 2>/dev/null || true
  wait "$pid" "$up_pid" 2>/dev/null || true
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
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
# Six completions (two models, plain + two streams each) and the upstream's 400 (outcome
# upstream_error) -> seven usage records, each written once.
records=0
for _ in $(seq 100); do
  records=$(curl -sf "$base/api/v1/usage/requests?limit=200" -H "authorization: Bearer $token" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["requests"]))')
  [ "$records" -ge 7 ] && break
  sleep 0.1
done
[ "$records" = 7 ] || { log "FAIL: expected 7 usage records, found $records"; exit 1; }
log "OpenAI SDK: echo and upstream, plain and streaming (with and without usage), upstream 400: OK; 7 usage records"
