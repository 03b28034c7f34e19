#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz, libFuzzer, AddressSanitizer) of the parsers that take
# hostile input: API keys, refresh tokens, Authorization headers, user fields and JSON bodies.
#
#   scripts/fuzz.sh [seconds-per-target (default 60)] [target ...]   (default: every target)
#
# Needs the nightly toolchain (`rustup toolchain install nightly`); installs cargo-fuzz with
# `cargo install cargo-fuzz --locked` when `cargo fuzz` is missing. For each target, copies the
# committed seeds fuzz/seeds/<target> into the (ignored) corpus fuzz/corpus/<target>, fuzzes for
# the given time, and prints one summary line. Full libFuzzer output: fuzz/target/fuzz-logs/.
# Exits 1 if any target crashed (panic, failed assertion, sanitizer report), naming the input
# under fuzz/artifacts/<target>/; reproduce with `cargo +nightly fuzz run <target> <file>` and
# reduce with `cargo +nightly fuzz tmin <target> <file>`. See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[fuzz.sh]\033[0m %s\n' "$*" >&2; }

secs=${1:-60}
shift || true
case "$secs" in
  '' | *[!0-9]*) log "seconds-per-target must be a whole number, got '$secs'"; exit 2 ;;
esac

if ! command -v cargo >/dev/null 2>&1; then
  log "cargo not found: install the Rust toolchain (https://rustup.rs) first"
  exit 1
fi
if ! cargo +nightly --version >/dev/null 2>&1; then
  log "the nightly toolchain is not available (cargo +nightly --version failed);"
  log "libFuzzer's instrumentation needs it: rustup toolchain install nightly"
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  log "cargo-fuzz not found: installing it (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked
fi
log "$(cargo +nightly --version), $(cargo fuzz --version)"

mapfile -t all_targets < <(cargo +nightly fuzz list)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  if ! printf '%s\n' "${all_targets[@]}" | grep -qxF -- "$t"; then
    log "unknown target '$t'; targets: ${all_targets[*]}"
    exit 2
  fi
done

logs=fuzz/target/fuzz-logs
mkdir -p "$logs"

# Build every target once, with AddressSanitizer (cargo-fuzz's default). Only if that build
# fails, fall back to no sanitizer (panics and assertions are still caught).
sanitizer=()
log "building the fuzz targets (AddressSanitizer; log: $logs/build.log)"
if ! cargo +nightly fuzz build >"$logs/build.log" 2>&1; then
  log "the AddressSanitizer build failed (tail of $logs/build.log below); retrying with --sanitizer none"
  tail -n 20 "$logs/build.log" >&2
  sanitizer=(--sanitizer none)
  cargo +nightly fuzz build "${sanitizer[@]}" >"$logs/build.log" 2>&1 || {
    log "the build failed without a sanitizer too; see $logs/build.log"
    exit 1
  }
fi

# json_bodies links the bundled SQLite of aigw-persistence, which libsqlite3-sys compiles with
# gcc's -fsanitize=address; its two function-local `static aiOff[]` arrays are then reported as
# an ODR violation by the (LLVM) ASan runtime at start-up, a false positive. Turn that check off.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0"

crashed=()
for t in "${targets[@]}"; do
  corpus=fuzz/corpus/$t
  mkdir -p "$corpus"
  if [ -d "fuzz/seeds/$t" ]; then
    cp -- fuzz/seeds/"$t"/* "$corpus"/
  fi
  logfile=$logs/$t.log
  log "fuzzing $t for ${secs}s (corpus $corpus, log $logfile)"
  status=0
  start=$SECONDS
  cargo +nightly fuzz run "${sanitizer[@]}" "$t" "$corpus" -- -max_total_time="$secs" \
    >"$logfile" 2>&1 || status=$?
  # libFuzzer's last status line ("#N <event> cov: C ft: F corp: K/B ...") and "Done N runs in S second(s)".
  last=$(grep -E '^#[0-9]+[[:space:]]' "$logfile" | tail -n 1 || true)
  runs=$(sed -nE 's/^Done ([0-9]+) runs in ([0-9]+) second.*/\1/p' "$logfile" | tail -n 1)
  took=$(sed -nE 's/^Done ([0-9]+) runs in ([0-9]+) second.*/\2/p' "$logfile" | tail -n 1)
  [ -n "$took" ] || took=$((SECONDS - start))
  [ -n "$runs" ] || runs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")
  artifact=$(sed -nE 's/.*Test unit written to ([^ ]+).*/\1/p' "$logfile" | tail -n 1)
  summary="$t: runs ${runs:-?} in ${took:-?}s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}"
  if [ "$status" -eq 0 ]; then
    log "$summary, no crash"
  else
    log "$summary, FAILED (exit $status): ${artifact:-no artifact written, see $logfile}"
    grep -m 1 -A 3 -E 'panicked at|ERROR: (AddressSanitizer|libFuzzer)' "$logfile" >&2 || tail -n 20 "$logfile" >&2
    crashed+=("$t: ${artifact:-see $logfile}")
  fi
done

if [ ${#crashed[@]} -gt 0 ]; then
  log "CRASHES in ${#crashed[@]} target(s):"
  for c in "${crashed[@]}"; do log "  $c"; done
  log "reproduce: cargo +nightly fuzz run <target> <artifact>; reduce: cargo +nightly fuzz tmin <target> <artifact>"
  exit 1
fi
log "no crashes in ${#targets[@]} target(s), ${secs}s each"
