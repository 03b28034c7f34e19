#!/usr/bin/env bash
# The README's test command: finds (or starts) PostgreSQL and Redis, installs PgBouncer
# (Debian's), aiosmtpd (the e-mail tests' SMTP server) and the single sign-on tests'
# OpenID Connect provider (npm), then runs every test.
#
#   scripts/test.sh [extra cargo test args]
#
# PostgreSQL, in order: $AIGW_TEST_DATABASE_URL; a server on 127.0.0.1:5432 (user postgres);
# a throwaway cluster started with initdb/pg_ctl when they are installed. Without any, the
# SQLite half runs and the PostgreSQL tests are skipped LOUDLY; with CI=true that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[test.sh]\033[0m %s\n' "$*" >&2; }
ci() { [ "${CI:-}" = "true" ]; }

if ! command -v cargo >/dev/null 2>&1; then
  log "cargo not found: install the Rust toolchain (https://rustup.rs) first"
  exit 1
fi

pg_reachable() {
  # $1: host, $2: port. Uses pg_isready when installed, else bash's /dev/tcp.
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h "$1" -p "$2" -t 3
  else
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
  fi
}

cleanup_cluster=""
cleanup() {
  if [ -n "$cleanup_cluster" ]; then
    log "stopping the throwaway PostgreSQL cluster"
    pg_ctl -D "$cleanup_cluster/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$cleanup_cluster"
  fi
}
trap cleanup EXIT

# A debug build of the workspace and its tests takes about 2 GB under target/; say so up front
# when the disk is short, since a full disk shows up later as a baffling linker crash.
target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir"
free_mb=$(df -Pm "$target_dir" | awk 'NR == 2 { print $4 }')
if [ -n "$free_mb" ] && [ "$free_mb" -lt 3072 ]; then
  log "WARNING: only ${free_mb} MB free for $target_dir; the build needs about 2 GB (cargo clean may help)"
else
  log "disk: ${free_mb:-?} MB free for $target_dir"
fi

skip_args=()
if [ -n "${AIGW_TEST_DATABASE_URL:-}" ]; then
  log "PostgreSQL: using AIGW_TEST_DATABASE_URL"
elif pg_reachable 127.0.0.1 5432; then
  export AIGW_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres"
  log "PostgreSQL: found a server on 127.0.0.1:5432"
else
  initdb_bin=$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n 1 || true)
  if [ -n "$initdb_bin" ]; then
    bindir=$(dirname "$initdb_bin")
    cleanup_cluster=$(mktemp -d)
    port=$(( 20000 + RANDOM % 20000 ))
    log "PostgreSQL: starting a throwaway cluster on port $port ($bindir)"
    runas=()
    if [ "$(id -u)" = "0" ]; then
      # initdb refuses to run as root: run the cluster as the postgres (or nobody) user.
      user=$(id -u postgres >/dev/null 2>&1 && echo postgres || echo nobody)
      chown "$user" "$cleanup_cluster"
      runas=(su -s /bin/sh "$user" -c)
      "${runas[@]}" "$bindir/initdb -A trust -U postgres -D $cleanup_cluster/data" >/dev/null
      "${runas[@]}" "$bindir/pg_ctl -D $cleanup_cluster/data -o '-p $port -k $cleanup_cluster -c listen_addresses=127.0.0.1' -w start" >/dev/null
    else
      "$bindir/initdb" -A trust -U postgres -D "$cleanup_cluster/data" >/dev/null
      "$bindir/pg_ctl" -D "$cleanup_cluster/data" -o "-p $port -k $cleanup_cluster -c listen_addresses=127.0.0.1" -w start >/dev/null
    fi
    export AIGW_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
  elif ci; then
    log "FAIL: CI=true but no PostgreSQL was found (set AIGW_TEST_DATABASE_URL or install PostgreSQL)"
    exit 1
  else
    log "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    log "!!! No PostgreSQL found: SKIPPING every PostgreSQL test; only SQLite runs.  !!!"
    log "!!! Set AIGW_TEST_DATABASE_URL=postgres://... or install PostgreSQL.         !!!"
    log "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    skip_args=(--skip postgres::)
  fi
fi

# PostgreSQL's server binaries: the failover test starts a primary and a standby of its own.
pg_bin=${AIGW_TEST_PG_BIN:-}
if [ -z "$pg_bin" ]; then
  # The first folder with all three tools: the newest /usr/lib/postgresql/N/bin, then PATH's.
  for dir in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -rV) "$(dirname "$(command -v initdb || echo .)")"; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/pg_basebackup" ]; then pg_bin=$dir; break; fi
  done
fi
if [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] && [ -x "$pg_bin/pg_basebackup" ]; then
  export AIGW_TEST_PG_BIN="$pg_bin"
  log "PostgreSQL failover: tests will start clusters with $pg_bin"
elif ci; then
  log "FAIL: CI=true but PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup) are not installed"
  exit 1
else
  log "!!! PostgreSQL server binaries not found: the failover test will SKIP (apt-get install postgresql) !!!"
fi

# Redis: the multi-node rate-limit tests start their own redis-server on a free port.
redis_bin=${AIGW_TEST_REDIS_SERVER:-$(command -v redis-server || true)}
if [ -n "$redis_bin" ]; then
  export AIGW_TEST_REDIS_SERVER="$redis_bin"
  log "Redis: tests will start $redis_bin on free ports"
elif ci; then
  log "FAIL: CI=true but redis-server is not installed (apt-get install redis-server, or set AIGW_TEST_REDIS_SERVER)"
  exit 1
else
  log "!!! redis-server not found: the Redis rate-limit tests will SKIP (apt-get install redis-server) !!!"
fi

# Debian's package $1 (for the binary at $2) when it is missing and this runs as root with apt.
# Its package would start a system instance: a policy-rc.d forbids that (one of ours only while
# installing, when the machine has none).
apt_install() {
  if [ -x "$2" ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then return 0; fi
  log "$1: installing Debian's package"
  local own_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
  fi
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null 2>&1; }; } || true
  if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
}

# PgBouncer (Debian's package): the pooler test starts its own on a free port.
pgbouncer_bin=${AIGW_TEST_PGBOUNCER:-$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)}
if [ -z "$pgbouncer_bin" ]; then
  apt_install pgbouncer /usr/sbin/pgbouncer
  pgbouncer_bin=$(ls /usr/sbin/pgbouncer 2>/dev/null || true)
fi
if [ -n "$pgbouncer_bin" ]; then
  export AIGW_TEST_PGBOUNCER="$pgbouncer_bin"
  log "PgBouncer: tests will start $pgbouncer_bin on free ports"
elif ci; then
  log "FAIL: CI=true but pgbouncer is not installed (apt-get install pgbouncer, or set AIGW_TEST_PGBOUNCER)"
  exit 1
else
  log "!!! pgbouncer not found: the PgBouncer test will SKIP (apt-get install pgbouncer) !!!"
fi

# PgBouncer 1.21+ (Debian 13's source, built into target/): the test of prepared statements
# through a transaction-mode pooler.
if [ -z "${AIGW_TEST_PGBOUNCER_PREPARED:-}" ]; then
  AIGW_TEST_PGBOUNCER_PREPARED=$(scripts/build_pgbouncer.sh || true)
fi
if [ -n "$AIGW_TEST_PGBOUNCER_PREPARED" ]; then
  export AIGW_TEST_PGBOUNCER_PREPARED
  log "PgBouncer with prepared statements: $AIGW_TEST_PGBOUNCER_PREPARED"
elif ci; then
  log "FAIL: CI=true but PgBouncer 1.21+ could not be built (scripts/build_pgbouncer.sh)"
  exit 1
else
  log "!!! PgBouncer 1.21+ not built: the prepared-statement pooler test will SKIP !!!"
fi

# nginx (Debian's package): the node-kill test puts one in front of two nodes.
nginx_bin=${AIGW_TEST_NGINX:-$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null || true)}
if [ -z "$nginx_bin" ]; then
  apt_install nginx-light /usr/sbin/nginx
  nginx_bin=$(ls /usr/sbin/nginx 2>/dev/null || true)
fi
if [ -n "$nginx_bin" ]; then
  export AIGW_TEST_NGINX="$nginx_bin"
  log "nginx: the node-kill test will start $nginx_bin on a free port"
elif ci; then
  log "FAIL: CI=true but nginx is not installed (apt-get install nginx-light, or set AIGW_TEST_NGINX)"
  exit 1
else
  log "!!! nginx not found: the node-kill test will SKIP (apt-get install nginx-light) !!!"
fi

# aiosmtpd (PyPI): the account e-mail tests start it as their SMTP server, one per test.
if [ -z "${AIGW_TEST_SMTP_PYTHON:-}" ] && command -v python3 >/dev/null 2>&1; then
  if ! .venv-smtp/bin/python -c 'import aiosmtpd' >/dev/null 2>&1; then
    rm -rf .venv-smtp
    python3 -m venv .venv-smtp >/dev/null 2>&1 && .venv-smtp/bin/pip install -q aiosmtpd >/dev/null 2>&1 || true
  fi
  if .venv-smtp/bin/python -c 'import aiosmtpd' >/dev/null 2>&1; then
    export AIGW_TEST_SMTP_PYTHON="$PWD/.venv-smtp/bin/python"
  fi
fi
if [ -n "${AIGW_TEST_SMTP_PYTHON:-}" ]; then
  log "SMTP: tests will start aiosmtpd ($AIGW_TEST_SMTP_PYTHON) on free ports"
elif ci; then
  log "FAIL: CI=true but aiosmtpd could not be installed (python3 -m venv, pip install aiosmtpd)"
  exit 1
else
  log "!!! aiosmtpd not installed (no python3, or PyPI out of reach): the e-mail tests will SKIP !!!"
fi

# The OpenID Connect provider of the single sign-on tests (npm: oauth2-mock-server, pinned by
# tests/oidc/package-lock.json) on Node.js.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  if [ ! -d tests/oidc/node_modules/oauth2-mock-server ]; then
    (cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1) || true
  fi
fi
if [ -d tests/oidc/node_modules/oauth2-mock-server ] && command -v node >/dev/null 2>&1; then
  log "OpenID Connect: tests will start tests/oidc/provider.mjs (node $(node --version)) on free ports"
elif ci; then
  log "FAIL: CI=true but the OpenID Connect test provider could not be installed (node, npm ci in tests/oidc)"
  exit 1
else
  log "!!! Node.js or the npm registry missing: the single sign-on tests will SKIP !!!"
fi

log "running: cargo test $* -- ${skip_args[*]:-}"
scope=(--workspace)
for arg in "$@"; do
  case "$arg" in -p|--package|-p*|--package=*) scope=() ;; esac
done
results=$(mktemp)
cargo test "${scope[@]}" "$@" -- "${skip_args[@]}" 2>&1 | tee "$results"

# The OpenAI Python SDK against the binary the tests just built (skipped if PyPI is out of reach).
if command -v python3 >/dev/null 2>&1; then
  scripts/sdk_check.sh target/debug/aigw
elif ci; then
  log "FAIL: CI=true but python3 is missing (needed for the OpenAI SDK check)"
  exit 1
else
  log "!!! python3 not found: the OpenAI SDK check was SKIPPED !!!"
fi
# schemathesis over the OpenAPI description against the same binary: every
# check, every phase; skipped with a notice when PyPI is out of reach.
if command -v python3 >/dev/null 2>&1; then
  AIGW_BIN=target/debug/aigw scripts/fuzz_api.sh
fi
# The web console in headless Chromium (tests/browser), on SQLite and on PostgreSQL, against
# the same binary; skipped with a notice when PyPI, the npm registry or chromium is out of reach.
if command -v python3 >/dev/null 2>&1; then
  scripts/browser_test.sh target/debug/aigw
elif ci; then
  log "FAIL: CI=true but python3 is missing (needed for the browser tests)"
  exit 1
else
  log "!!! python3 not found: the browser tests were SKIPPED !!!"
fi
if [ ${#skip_args[@]} -gt 0 ]; then
  log "REMINDER: the PostgreSQL tests were SKIPPED (no PostgreSQL found)."
fi
if [ -z "$redis_bin" ]; then
  log "REMINDER: the Redis tests were SKIPPED (no redis-server found)."
fi

# One closing line for the whole run, summed over every test binary of cargo test.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$results"
rm -f "$results"
