#!/usr/bin/env bash
# Packs what scripts/bench_cores.sh runs into .bench-tools/, so that it can run on a machine
# that has none of it and cannot install anything (no package manager, no network, no cargo):
# wrk, nginx and taskset as installed here, the release binaries aigw, bare and rate, every
# shared library they load (ldd) and the dynamic loader itself.
#
#   scripts/bench_bundle.sh [--bin DIR] [--max-mib N]
#
#   --bin DIR     where aigw, bare and rate are (default target/dist, built first when
#                 missing)
#   --max-mib N   fail when the bundle is larger (default 48)
#
# Layout: .bench-tools/exe/NAME (the program, stripped), .bench-tools/lib/ (its libraries, and
# the loader as lib/ld.so), .bench-tools/bin/NAME (a /bin/sh wrapper that runs exe/NAME with
# lib/ld.so --library-path lib). So the programs use no library of the target machine, not
# even its C library, and LD_LIBRARY_PATH stays unset for everything else. The nginx
# configurations of the benchmark name every path they use (no mime.types, no modules).
# MANIFEST lists what came from where.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=target/dist max_mib=48
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin_dir=$2; shift ;;
    --max-mib) max_mib=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
log() { printf '\033[1m[bundle]\033[0m %s\n' "$*" >&2; }
PATH="$PATH:/usr/sbin:/sbin"

for tool in wrk nginx taskset ldd strip; do
  command -v "$tool" >/dev/null || { log "$tool not found (apt-get install wrk nginx-light util-linux libc-bin binutils)"; exit 1; }
done
if [ "$bin_dir" = target/dist ] && ! { [ -x "$bin_dir/aigw" ] && [ -x "$bin_dir/bare" ] && [ -x "$bin_dir/rate" ]; }; then
  log "building release binaries (aigw, bare, rate)"
  cargo build --profile dist --quiet -p aigw-http -p aigw-bench --bins
fi
for b in aigw bare rate; do
  [ -x "$bin_dir/$b" ] || { log "$bin_dir/$b not found"; exit 1; }
done

dest=.bench-tools
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/exe" "$dest/lib"
manifest="$dest/MANIFEST"
{
  echo "bench bundle for scripts/bench_cores.sh, made $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -srm)"
  echo "wrk: $(wrk -v 2>&1 | head -1 || true)"
  echo "nginx: $(nginx -v 2>&1)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
} >"$manifest"

add() { # name, program
  local name=$1 src loader lib
  src=$(readlink -f "$2")
  cp "$src" "$dest/exe/$name"
  chmod u+w,a+rx "$dest/exe/$name"
  strip --strip-unneeded "$dest/exe/$name" 2>/dev/null || true
  echo "exe/$name <- $src" >>"$manifest"
  # ldd: "libx.so.1 => /path (0x...)", the loader as "/lib64/ld-linux-x86-64.so.2 (0x...)",
  # and "linux-vdso.so.1 (0x...)", which the kernel provides.
  loader=$(ldd "$src" | awk '$1 ~ /^\// { print $1 }')
  if [ -z "$loader" ]; then # static: no loader, no libraries
    printf '#!/bin/sh\nexec "${0%%/*}/../exe/%s" "$@"\n' "$name" >"$dest/bin/$name"
  else
    [ -e "$dest/lib/ld.so" ] || { cp "$(readlink -f "$loader")" "$dest/lib/ld.so"; echo "lib/ld.so <- $loader" >>"$manifest"; }
    for lib in $(ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'); do
      [ -e "$dest/lib/${lib##*/}" ] && continue
      cp "$(readlink -f "$lib")" "$dest/lib/${lib##*/}"
      echo "lib/${lib##*/} <- $(readlink -f "$lib")" >>"$manifest"
    done
    printf '#!/bin/sh\nd="${0%%/*}/.."\nexec "$d/lib/ld.so" --library-path "$d/lib" "$d/exe/%s" "$@"\n' "$name" >"$dest/bin/$name"
  fi
  chmod 755 "$dest/bin/$name"
}
add wrk "$(command -v wrk)"
add nginx "$(command -v nginx)"
add taskset "$(command -v taskset)"
for b in aigw bare rate; do add "$b" "$bin_dir/$b"; done

# Each wrapper must run here, through the bundle's loader.
case "$("$dest/bin/wrk" -v 2>&1 || true)" in wrk*) ;; *) log "bundled wrk does not run"; exit 1 ;; esac
case "$("$dest/bin/nginx" -v 2>&1 || true)" in *"nginx version"*) ;; *) log "bundled nginx does not run"; exit 1 ;; esac
"$dest/bin/taskset" -c 0 true || { log "bundled taskset does not run"; exit 1; }
"$dest/bin/aigw" --help >/dev/null 2>&1 || { log "bundled aigw does not run"; exit 1; }
"$dest/bin/rate" --help >/dev/null 2>&1 || { log "bundled rate does not run"; exit 1; }

size=$(du -sb "$dest" | cut -f1)
du -b "$dest"/exe/* "$dest"/lib/* | sort -rn | awk '{ printf "%8.1f MiB  %s\n", $1 / 1048576, $2 }' >>"$manifest"
log "$dest: $(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }') MiB ($(find "$dest" -type f | wc -l) files; MANIFEST lists them)"
if [ "$size" -gt $((max_mib * 1048576)) ]; then log "larger than --max-mib $max_mib"; exit 1; fi
