#!/usr/bin/env bash
# Builds aigw with profile-guided optimisation (PGO): an instrumented build runs the benchmark's
# workload (scripts/bench.sh --quick: chat calls through an nginx mock upstream with and without
# key limits, /auth/me, logins, API-key lookups, on SQLite and, when reachable, PostgreSQL),
# then the dist build (whole-program LTO) is compiled again with the profile it wrote.
#
#   scripts/pgo.sh            # prints the path of the optimised binary
#
# Output: target/pgo/<host triple>/dist/aigw. The ordinary builds (`--release`, `--profile
# dist`) are not touched; measure the two with `scripts/bench.sh` and `scripts/bench.sh --aigw <path>`
# (docs/performance.md "Profile-guided builds"). Needs what scripts/bench.sh needs, and
# rustup's `llvm-tools` component (installed here when missing: `rustup component add
# llvm-tools`). Takes two dist builds and the training run (~5 min): 29 min on 2 cores;
# the builds go to target/pgo-train and target/pgo (about 1 GB each).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[pgo]\033[0m %s\n' "$*" >&2; }

host=$(rustc -vV | awk '/^host:/ { print $2 }')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  log "installing rustup's llvm-tools (llvm-profdata of this rustc's LLVM)"
  rustup component add llvm-tools
fi
[ -x "$profdata" ] || { log "llvm-profdata not found at $profdata"; exit 1; }

data=$PWD/target/pgo-data
rm -rf "$data"
mkdir -p "$data"

# --target: RUSTFLAGS then apply to the binary's code only, not to build scripts and proc macros.
log "1/4 instrumented build (target/pgo-train)"
RUSTFLAGS="-Cprofile-generate=$data" cargo build --profile dist --quiet -p aigw-http --bin aigw \
  --target "$host" --target-dir target/pgo-train

log "2/4 training run: scripts/bench.sh --quick on the instrumented binary"
scripts/bench.sh --quick --aigw "target/pgo-train/$host/dist/aigw" >"$data/training.txt"
ls "$data"/*.profraw >/dev/null 2>&1 || { log "the training run wrote no profile"; exit 1; }

log "3/4 merging the profile"
"$profdata" merge -o "$data/aigw.profdata" "$data"/*.profraw

log "4/4 optimised build (target/pgo)"
RUSTFLAGS="-Cprofile-use=$data/aigw.profdata" cargo build --profile dist --quiet -p aigw-http \
  --bin aigw --target "$host" --target-dir target/pgo
echo "$PWD/target/pgo/$host/dist/aigw"
