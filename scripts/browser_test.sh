#!/usr/bin/env bash
# The web console in a real browser: tests/browser/ (pytest + selenium) drives headless
# Chromium through Debian's chromedriver against the binary, once on SQLite (a fresh data dir)
# and once on PostgreSQL (a fresh database aigw_browser_<random> on $AIGW_TEST_DATABASE_URL,
# default postgres://postgres@127.0.0.1:5432/postgres, dropped afterwards), each with its own
# aigw on a free loopback port and a platform admin made with `aigw admin create-user`.
# Every page load is checked (CSP header without unsafe-inline/unsafe-eval, no browser console
# error, axe-core serious/critical violations) and screenshotted (light/dark, desktop 1440x900
# and phone 390x844) under target/browser-screenshots/<backend>/; with
# AIGW_BROWSER_UPDATE_SCREENSHOTS=1 the main ones of a passing SQLite run replace those in
# docs/screenshots/ (the README's).
#
#   scripts/browser_test.sh [path to the aigw binary (default target/debug/aigw)] [pytest args]
#
# Needs python3 with venv (selenium and pytest go into .venv-browser from PyPI), chromium and
# chromium-driver (installed with apt-get when missing and running as root), curl and tar
# (axe-core, pinned and checked against the npm registry's sha512, cached in .cache/axe-core/).
# Without PyPI, the npm registry or chromium the run is skipped with a notice (exit 0); with
# CI=true a missing chromium/chromedriver, or a missing PostgreSQL, fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/aigw}
shift || true
log() { printf '\033[1m[browser_test]\033[0m %s\n' "$*" >&2; }
ci() { [ "${CI:-}" = "true" ]; }
skip() {
  log "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  log "!!! SKIPPED the browser tests: $*"
  log "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  exit 0
}
[ -x "$bin" ] || cargo build --quiet --bin aigw
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac

# --- Chromium and chromedriver (Debian's packages, the same build).
find_tools() { # AIGW_BROWSER_CHROMIUM / AIGW_BROWSER_CHROMEDRIVER name others
  chromium=${AIGW_BROWSER_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
  chromedriver=${AIGW_BROWSER_CHROMEDRIVER:-$(command -v chromedriver || true)}
  [ -n "$chromium" ] && [ -x "$chromium" ] || chromium=""
  [ -n "$chromedriver" ] && [ -x "$chromedriver" ] || chromedriver=""
}
find_tools
if { [ -z "$chromium" ] || [ -z "$chromedriver" ]; } && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing chromium and chromium-driver (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >&2 || true
  find_tools
fi
if [ -z "$chromium" ] || [ -z "$chromedriver" ]; then
  if ci; then
    log "FAIL: CI=true but chromium/chromedriver is missing (apt-get install chromium chromium-driver)"
    exit 1
  fi
  skip "chromium or chromedriver not installed (apt-get install chromium chromium-driver)"
fi

# --- selenium and pytest (PyPI).
if ! .venv-browser/bin/python -c 'import selenium, pytest' >/dev/null 2>&1; then
  rm -rf .venv-browser
  if ! python3 -m venv .venv-browser >/dev/null 2>&1 ||
    ! .venv-browser/bin/pip install -q 'selenium>=4.20,<5' 'pytest>=8,<10' >/dev/null 2>&1; then
    rm -rf .venv-browser
    skip "could not install selenium and pytest from PyPI"
  fi
fi

# --- axe-core from the npm registry: a pinned version, its tarball checked against the
# registry's dist.integrity (and the same value pinned here), cached in .cache/axe-core/.
axe_version=4.10.3
axe_integrity=sha512-Xm7bpRXnDSX2YE2YFfBk2FnF0ep6tmG7xPh8iHee8MIcrgq762Nkce856dYtJYLkuIoYZvGfTs/PbZhideTcEg==
axe_tgz=.cache/axe-core/axe-core-$axe_version.tgz
sri() { python3 -c 'import base64,hashlib,sys; print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$1"; }
mkdir -p .cache/axe-core
if [ ! -s "$axe_tgz" ] || [ "$(sri "$axe_tgz")" != "$axe_integrity" ]; then
  registry=$(curl -sfL --max-time 30 "https://registry.npmjs.org/axe-core/$axe_version" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["dist"]["integrity"])' 2>/dev/null) ||
    skip "the npm registry is out of reach (axe-core $axe_version)"
  if [ "$registry" != "$axe_integrity" ]; then
    log "FAIL: the registry's integrity of axe-core $axe_version is $registry, pinned $axe_integrity"
    exit 1
  fi
  curl -sfL --max-time 60 -o "$axe_tgz.part" "https://registry.npmjs.org/axe-core/-/axe-core-$axe_version.tgz" ||
    { rm -f "$axe_tgz.part"; skip "could not download axe-core $axe_version"; }
  if [ "$(sri "$axe_tgz.part")" != "$axe_integrity" ]; then
    rm -f "$axe_tgz.part"
    log "FAIL: axe-core-$axe_version.tgz does not match its sha512 ($axe_integrity)"
    exit 1
  fi
  mv "$axe_tgz.part" "$axe_tgz"
fi
work=$(mktemp -d)
tar -xzf "$axe_tgz" -C "$work" package/axe.min.js

# --- PostgreSQL: a fresh database on the test server.
pg_admin_url=${AIGW_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
pg_db="aigw_browser_$(python3 -c 'import secrets; print(secrets.token_hex(6))')"
pg_url=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$pg_admin_url" "$pg_db")
pg_created=""
pid=""
cleanup() {
  local status=$?
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "${oidc_pid:-}" ]; then kill -TERM "$oidc_pid" 2>/dev/null || true; fi
  if [ -n "$pg_created" ]; then
    psql -q "$pg_admin_url" -c "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 ||
      psql -q "$pg_admin_url" -c "DROP DATABASE IF EXISTS $pg_db" >/dev/null 2>&1 || log "could not drop $pg_db"
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- The OpenID Connect provider of the single sign-on test (tests/oidc, npm), shared by both
# backends; one person signs in through it ($sso_email). Without Node.js or the npm registry
# the test is skipped (with CI=true that is a failure).
sso_issuer="" sso_email="" oidc_pid=""
if command -v node >/dev/null 2>&1 && [ ! -d tests/oidc/node_modules/oauth2-mock-server ] && command -v npm >/dev/null 2>&1; then
  (cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1) || true
fi
if command -v node >/dev/null 2>&1 && [ -d tests/oidc/node_modules/oauth2-mock-server ]; then
  sso_email="sso-browser-$(python3 -c 'import secrets; print(secrets.token_hex(6))')@example.com"
  sso_claims=$(python3 -c 'import base64,json,sys; print(base64.urlsafe_b64encode(json.dumps({"sub": "browser-" + sys.argv[1], "email": sys.argv[1], "email_verified": True, "name": "Browser SSO"}).encode()).decode().rstrip("="))' "$sso_email")
  AIGW_OIDC_STAY=1 AIGW_OIDC_DEFAULT=$sso_claims node tests/oidc/provider.mjs </dev/null >"$work/oidc.out" 2>&1 &
  oidc_pid=$!
  for _ in $(seq 100); do
    sso_issuer=$(sed -n 's/^issuer //p' "$work/oidc.out")
    [ -n "$sso_issuer" ] && break
    sleep 0.2
  done
fi
if [ -z "$sso_issuer" ]; then
  if ci; then log "FAIL: CI=true but the OpenID Connect test provider did not start (node, npm ci in tests/oidc)"; exit 1; fi
  log "!!! no OpenID Connect test provider (Node.js or npm missing): the single sign-on browser test will SKIP !!!"
  sso_email=""
fi
admin_email=admin@example.com
admin_password="browser admin passphrase $(python3 -c 'import secrets; print(secrets.token_hex(8))')"
shots=target/browser-screenshots
logs=target/browser-logs
mkdir -p "$logs"
failed=()
passed=()

run_backend() { # backend name, database URL (empty: SQLite in the data dir), pytest args
  local backend=$1 url=$2 dir="$work/$1" port started
  shift 2
  port=$(free_port)
  mkdir -p "$dir"
  rm -rf "${shots:?}/$backend"
  {
    printf '[server]\nlisten = "127.0.0.1:%s"\ndata_dir = "%s"\n' "$port" "$dir/data"
    [ -n "$sso_issuer" ] && printf 'public_url = "http://127.0.0.1:%s"\n' "$port"
    [ -n "$url" ] && printf '[database]\nurl = "%s"\n' "$url"
    printf '[auth]\njwt_secret = "%s"\n' "$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
    printf '[rate_limit]\nenabled = false\n'
    printf '[usage]\nrequest_records = "database"\nflush_interval_ms = 200\n'
    printf '[console]\nenabled = true\n'
    if [ -n "$sso_issuer" ]; then
      printf '[[sso.providers]]\nid = "corp"\nname = "Corp"\nissuer = "%s"\nclient_id = "aigw-browser"\nallowed_domains = ["example.com"]\n' "$sso_issuer"
    fi
  } >"$dir/aigw.toml"
  if ! printf '%s\n' "$admin_password" | "$bin" --config "$dir/aigw.toml" admin create-user \
    --email "$admin_email" --name "Platform Admin" --role admin --password-stdin >"$dir/admin.log" 2>&1; then
    log "FAIL [$backend]: aigw admin create-user"
    cat "$dir/admin.log" >&2
    failed+=("$backend")
    return
  fi
  "$bin" --config "$dir/aigw.toml" >"$logs/$backend.log" 2>&1 &
  pid=$!
  local base="http://127.0.0.1:$port"
  started=""
  for _ in $(seq 150); do
    if curl -sf "$base/healthz" >/dev/null; then started=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if [ -z "$started" ]; then
    log "FAIL [$backend]: aigw did not start; its log:"
    tail -n 40 "$logs/$backend.log" >&2
    failed+=("$backend")
    pid=""
    return
  fi
  log "[$backend] aigw on $base; running tests/browser"
  local t0=$SECONDS status=0
  AIGW_BROWSER_BASE_URL=$base AIGW_BROWSER_BACKEND=$backend AIGW_BROWSER_SHOTS=$shots \
    AIGW_BROWSER_AXE="$work/package/axe.min.js" AIGW_BROWSER_CHROMIUM=$chromium \
    AIGW_BROWSER_CHROMEDRIVER=$chromedriver AIGW_BROWSER_ADMIN_EMAIL=$admin_email \
    AIGW_BROWSER_ADMIN_PASSWORD=$admin_password AIGW_BROWSER_BIN=$bin AIGW_BROWSER_CONFIG="$dir/aigw.toml" \
    AIGW_BROWSER_SSO_EMAIL=$sso_email \
    .venv-browser/bin/python -m pytest tests/browser -p no:cacheprovider -rs -q "$@" || status=$?
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
  if grep -qiE 'panicked|internal error' "$logs/$backend.log"; then
    log "FAIL [$backend]: the server log shows panics or internal errors:"
    grep -iE 'panicked|internal error' "$logs/$backend.log" >&2
    status=1
  fi
  log "[$backend] $((SECONDS - t0)) s, pytest status $status; screenshots in $shots/$backend/, server log $logs/$backend.log"
  if [ "$status" = 0 ]; then passed+=("$backend"); else failed+=("$backend"); fi
}

run_backend sqlite "" "$@"
if [ "${AIGW_BROWSER_UPDATE_SCREENSHOTS:-}" = 1 ] && [ " ${failed[*]:-} " != *" sqlite "* ]; then
  # The README's screenshots, when asked for: a passing SQLite run's main pages, light desktop
  # and dark phone, cut to one screen (900 and 844 pixels high). A plain test run leaves the
  # working tree as it was.
  mkdir -p docs/screenshots
  for page in keys usage team admin-users team-usage mfa-enrollment; do
    for variant in light-desktop:900 dark-phone:844; do
      file="$page-${variant%:*}.png"
      if [ -f "$shots/sqlite/$file" ]; then
        python3 tests/browser/png_crop.py "${variant#*:}" "$shots/sqlite/$file" "docs/screenshots/$file"
      fi
    done
  done
fi

if ! command -v psql >/dev/null 2>&1; then
  if ci; then log "FAIL: CI=true but psql (PostgreSQL client) is missing"; exit 1; fi
  log "!!! psql not found: the PostgreSQL half of the browser tests is SKIPPED !!!"
elif ! psql -q "$pg_admin_url" -c "CREATE DATABASE $pg_db" >/dev/null 2>"$work/pg.err"; then
  if ci; then log "FAIL: CI=true but no database could be created on the test PostgreSQL: $(head -n 1 "$work/pg.err")"; exit 1; fi
  log "!!! the test PostgreSQL is unusable ($(head -n 1 "$work/pg.err")): the PostgreSQL half is SKIPPED !!!"
else
  pg_created=1
  run_backend postgres "$pg_url" "$@"
fi

log "passed: ${passed[*]:-none}; failed: ${failed[*]:-none}"
[ ${#failed[@]} = 0 ]
