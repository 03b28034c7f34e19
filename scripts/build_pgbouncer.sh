#!/usr/bin/env bash
# Builds PgBouncer 1.24.1 from Debian 13's source package (the upstream tarball Debian's
# archive serves, checked against the SHA-256 its Sources index lists) into
# target/pgbouncer-1.24.1/, for the test of prepared statements through a transaction-mode
# pooler (PgBouncer 1.21 and later, `max_prepared_statements`); Debian 12 ships 1.18.
#
#   scripts/build_pgbouncer.sh        prints the binary's absolute path
#
# Needs curl (or wget), a C compiler, make, pkg-config, libevent and OpenSSL's headers; as root
# with apt-get it installs what is missing. Exits 1, printing nothing on stdout, when it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.24.1
sha256=da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0
url="http://deb.debian.org/debian/pool/main/p/pgbouncer/pgbouncer_${version}.orig.tar.gz"

log() { printf '\033[1m[build_pgbouncer.sh]\033[0m %s\n' "$*" >&2; }

target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
out="$(cd "$target" && pwd)/pgbouncer-$version"
if [ -x "$out/pgbouncer" ]; then
  echo "$out/pgbouncer"
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && ! pkg-config --exists libevent 2>/dev/null; then
  log "installing the build dependencies from Debian (libevent-dev, libssl-dev, pkg-config, gcc, make)"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q libevent-dev libssl-dev pkg-config gcc make >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q libevent-dev libssl-dev pkg-config gcc make >/dev/null 2>&1; }; } || true
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "downloading PgBouncer $version ($url)"
if command -v curl >/dev/null 2>&1; then
  curl -sSfL --max-time 120 -o "$work/src.tar.gz" "$url" || { log "download failed"; exit 1; }
else
  wget -q -T 120 -O "$work/src.tar.gz" "$url" || { log "download failed"; exit 1; }
fi
if ! echo "$sha256  $work/src.tar.gz" | sha256sum -c --quiet - >/dev/null 2>&1; then
  log "the tarball's SHA-256 is not Debian's: refusing to build it"
  exit 1
fi
tar -xzf "$work/src.tar.gz" -C "$work"
log "building PgBouncer $version"
(
  cd "$work/pgbouncer-$version"
  ./configure --without-cares --without-pam --without-systemd --without-ldap >"$work/configure.log" 2>&1
  make -j"$(nproc 2>/dev/null || echo 2)" pgbouncer >"$work/make.log" 2>&1
) || { log "the build failed: $(tail -n 5 "$work"/*.log 2>/dev/null)"; exit 1; }
mkdir -p "$out"
cp "$work/pgbouncer-$version/pgbouncer" "$out/pgbouncer"
echo "$out/pgbouncer"
