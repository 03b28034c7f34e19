#!/usr/bin/env bash
# Builds aigw's OCI container image without a container daemon, then checks it.
#
#   scripts/image.sh [--bin PATH] [--out DIR] [--tag TAG] [--check auto|podman|chroot|none]
#
# --bin    the aigw binary to ship (default target/release/aigw, built with
#          `cargo build --release -p aigw-http` when missing)
# --out    output folder (default target/image): the OCI image layout in DIR/oci and the
#          `oci-archive` tarball DIR/aigw-TAG.oci.tar
# --tag    image tag (default: the binary's version, e.g. 0.1.0)
# --check  how to run the built image for the check: podman when it runs containers on this
#          machine, else the image's unpacked layers in a chroot as its user (auto, the
#          default); `none` skips the check
#
# The image holds the stripped binary, only the shared libraries it loads (ldd, the dynamic
# loader included), the CA bundle, /etc/passwd and /etc/group with the user aigw (65532),
# /tmp (1777) and /data (the volume, owned by aigw): no shell, no package manager. Tools come
# from Debian's packages (umoci builds the layout, skopeo writes the archive), installed when
# missing. Needs root (the layer's owners, the chroot): run as another user, it asks sudo.
# SOURCE_DATE_EPOCH (default: the time of the last commit) sets every timestamp in the image,
# so the same binary gives the same digest.
#
# The check starts the image, waits for GET /readyz, registers a user, logs in, creates an
# `ai_gateway` key, makes one chat call on the `echo` model, prints the resident memory
# (VmRSS) idle and after the calls, and stops it with SIGTERM. Loopback only.
set -euo pipefail

log() { printf '[image] %s\n' "$*" >&2; }
die() { printf '[image] error: %s\n' "$*" >&2; exit 1; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

bin=""
out=""
tag=""
check=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=${2:?--bin needs a path}; shift 2 ;;
    --bin=*) bin=${1#*=}; shift ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --tag=*) tag=${1#*=}; shift ;;
    --check) check=${2:?--check needs auto, podman, chroot or none}; shift 2 ;;
    --check=*) check=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
case "$check" in auto | podman | chroot | none) ;; *) die "--check: auto, podman, chroot or none, not $check" ;; esac

repo=$(cd "$(dirname "$0")/.." && pwd)
# Paths given on the command line are relative to where the script was started.
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
if [ -z "$bin" ]; then
  bin=$repo/target/release/aigw
  if [ ! -x "$bin" ]; then
    log "no $bin: building it (cargo build --release -p aigw-http)"
    (cd "$repo" && cargo build --release -p aigw-http)
  fi
else
  bin=$(abspath "$bin")
fi
[ -x "$bin" ] || die "the binary $bin does not exist or is not executable"
if [ -z "$out" ]; then out=$repo/target/image; else out=$(abspath "$out"); fi

# Everything below needs root: the layer records owners (root, and 65532 for /data), the check
# mounts and chroots. The binary is built above as the calling user.
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || die "run as root, or install sudo"
  log "not root: running the rest under sudo"
  exec sudo --preserve-env=SOURCE_DATE_EPOCH -- "$0" --bin "$bin" --out "$out" \
    ${tag:+--tag "$tag"} --check "$check"
fi

# --- tools -------------------------------------------------------------------------------------

need_pkgs=()
want() { command -v "$1" >/dev/null || need_pkgs+=("$2"); }
want umoci umoci
want skopeo skopeo
want jq jq
want curl curl
want strip binutils
want ldd libc-bin
want unshare util-linux
[ -f /etc/ssl/certs/ca-certificates.crt ] || need_pkgs+=(ca-certificates)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing: ${need_pkgs[*]} (no apt-get here: install them)"
  log "installing ${need_pkgs[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
log "tools: $(umoci --version), $(skopeo --version)"

# --- what goes in ------------------------------------------------------------------------------

version=$("$bin" --version | awk '{ print $NF }')
[ -n "$version" ] || die "$bin --version printed no version"
tag=${tag:-$version}
case "$tag" in *[!A-Za-z0-9._-]*) die "--tag: letters, digits, '.', '_' and '-' only" ;; esac
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)
fi
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
case "$arch" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
uid=65532
layout=$out/oci
archive=$out/aigw-$tag.oci.tar

work=$(mktemp -d /tmp/aigw-image.XXXXXX)
pid=""
ctr=""
loaded_image=""
cleanup() {
  local rc=$?
  if [ -n "$ctr" ]; then podman rm -f -t 5 "$ctr" >/dev/null 2>&1 || true; fi
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ -n "$loaded_image" ]; then podman rmi -f "$loaded_image" >/dev/null 2>&1 || true; fi
  # The check's mounts live in the aigw process's own mount namespace and are gone with it,
  # so nothing under $work is mounted here.
  rm -rf "$work"
  if [ -n "${SUDO_UID:-}" ] && [ -d "$out" ]; then chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$out"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "binary $bin (aigw $version, $arch), tag $tag, created $created"
mkdir -p "$out"
rm -rf "$layout" "$archive"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
# An empty image unpacked as a bundle: its rootfs is filled below and repacked as one layer.
umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
root=$work/bundle/rootfs

install -d -m 0755 "$root/usr/local/bin" "$root/etc/ssl/certs"
install -d -m 1777 "$root/tmp"
install -d -m 0750 -o "$uid" -g "$uid" "$root/data"
strip --strip-all -o "$root/usr/local/bin/aigw" "$bin"
chmod 0755 "$root/usr/local/bin/aigw"

# Exactly the shared libraries the binary loads, at the paths the loader found them, and the
# loader itself (`ldd` lines are "name => /path (addr)" or "/path (addr)").
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
[ -n "$libs" ] || log "no shared libraries (a static binary)"
for lib in $libs; do
  install -d -m 0755 "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
  chmod 0755 "$root$lib"
  log "library $lib ($(du -k "$root$lib" | cut -f1) KiB)"
done

cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\naigw:x:%s:%s:aigw:/nonexistent:/sbin/nologin\n' \
  "$uid" "$uid" >"$root/etc/passwd"
printf 'root:x:0:\naigw:x:%s:\n' "$uid" >"$root/etc/group"
# glibc resolves names through /etc/hosts (which runtimes provide) before DNS.
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
log "rootfs: $(du -sk "$root" | cut -f1) KiB in $(find "$root" -type f | wc -l) files"

umoci repack --image "$layout:$tag" \
  --history.created "$created" --history.created_by "scripts/image.sh" \
  --history.comment "aigw $version: binary, shared libraries, CA certificates, user aigw" \
  "$work/bundle"
# After the repack: repack leaves out the paths of declared volumes, and /data must be there.
umoci config --image "$layout:$tag" \
  --created "$created" --history.created "$created" --history.created_by "scripts/image.sh" \
  --history.comment "entrypoint, user, environment, port, volume, labels" \
  --os linux --architecture "$arch" \
  --config.user "$uid:$uid" \
  --config.entrypoint /usr/local/bin/aigw \
  --config.workingdir / \
  --config.env PATH=/usr/local/bin \
  --config.env AIGW__SERVER__LISTEN=0.0.0.0:8080 \
  --config.env AIGW__SERVER__DATA_DIR=/data \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --config.exposedports 8080/tcp \
  --config.volume /data \
  --config.stopsignal SIGTERM \
  --config.label org.opencontainers.image.title=aigw \
  --config.label "org.opencontainers.image.description=aigw: account and credential service and AI gateway" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$revision" \
  --config.label "org.opencontainers.image.created=$created" \
  --config.label org.opencontainers.image.licenses=Apache-2.0
umoci gc --layout "$layout"

manifest_digest=$(jq -r --arg t "$tag" \
  '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t) | .digest' \
  "$layout/index.json")
[ -n "$manifest_digest" ] || die "no manifest tagged $tag in $layout/index.json"
blob() { printf '%s/blobs/%s\n' "$layout" "${1/://}"; }
manifest=$(blob "$manifest_digest")
config_digest=$(jq -r .config.digest "$manifest")
compressed=$(jq '[.config.size, (.layers[].size)] | add' "$manifest")
compressed=$((compressed + $(stat -c %s "$manifest")))

skopeo --insecure-policy copy --quiet "oci:$layout:$tag" "oci-archive:$archive:aigw:$tag"
archive_digest=$(skopeo inspect --format '{{.Digest}}' "oci-archive:$archive")
[ "$archive_digest" = "$manifest_digest" ] ||
  die "the archive's digest $archive_digest differs from the layout's $manifest_digest"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB (%.1f MB)", b / 1048576, b / 1000000 }'; }
log "layout   $layout (tag $tag)"
log "archive  $archive, $(mib "$(stat -c %s "$archive")")"
log "compressed image (manifest, config, layers): $(mib "$compressed")"
log "digest   $manifest_digest"
[ "$compressed" -lt 40000000 ] || log "warning: the compressed image is 40 MB or more"

# --- check -------------------------------------------------------------------------------------

if [ "$check" = none ]; then
  log "check skipped (--check none)"
  exit 0
fi

# A free loopback port: the checked process shares this machine's network.
port=""
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 30000))
  if ! (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || die "no free loopback port found"
base=http://127.0.0.1:$port

# How podman may run here, tried in turn: as it is; with ulimits within this host's own (podman
# raises them by default, which a host without CAP_SYS_RESOURCE refuses); and with runc where
# crun refuses the host's cgroups. Each entry: "global options|run options".
hard_nofile=$(ulimit -Hn)
podman_variants=("|" "|--ulimit nofile=$hard_nofile:$hard_nofile --ulimit nproc=4096:4096")
if command -v runc >/dev/null; then
  podman_variants+=("--runtime runc|--ulimit nofile=$hard_nofile:$hard_nofile --ulimit nproc=4096:4096")
fi
podman_global=()
podman_run=()
image_id=${config_digest#sha256:}
podman_works() {
  command -v podman >/dev/null || return 1
  if ! podman image exists "$image_id" 2>/dev/null; then
    podman load -q -i "$archive" >/dev/null 2>"$work/podman.err" || return 1
    loaded_image=$image_id
  fi
  local variant
  for variant in "${podman_variants[@]}"; do
    read -r -a podman_global <<<"${variant%%|*}"
    read -r -a podman_run <<<"${variant#*|}"
    if podman "${podman_global[@]}" run --rm "${podman_run[@]}" "$image_id" --version \
      >/dev/null 2>>"$work/podman.err"; then
      return 0
    fi
  done
  return 1
}

if [ "$check" != chroot ] && podman_works; then
  check=podman
elif [ "$check" = podman ]; then
  cat "$work/podman.err" >&2 2>/dev/null || true
  die "podman cannot run containers here"
else
  if [ "$check" = auto ]; then
    reason=$(tail -n 1 "$work/podman.err" 2>/dev/null || true)
    log "podman missing or unable to run containers here${reason:+ ($reason)}: checking in a chroot"
  fi
  check=chroot
fi

if [ "$check" = podman ]; then
  log "check: podman ${podman_global[*]} run ${podman_run[*]}, read-only, host network, listen 127.0.0.1:$port"
  ctr=aigw-image-check-$$
  # The image's own anonymous volume at /data, removed with the container.
  # Read-only, as deploy/k8s runs it (podman mounts a tmpfs on /tmp).
  podman "${podman_global[@]}" run -d --name "$ctr" --network host --read-only "${podman_run[@]}" \
    -e "AIGW__SERVER__LISTEN=127.0.0.1:$port" "$image_id" >/dev/null
  pid=$(podman inspect -f '{{.State.Pid}}' "$ctr")
  logs() { podman logs "$ctr" 2>&1 | tail -n 30 >&2; }
else
  # The image as a runtime would see it: its layers unpacked, its runtime configuration
  # (environment, arguments, user, working folder) from the bundle's config.json.
  umoci unpack --image "$layout:$tag" "$work/check" >/dev/null
  spec=$work/check/config.json
  croot=$work/check/rootfs
  mapfile -t env_vars < <(jq -r '.process.env[]' "$spec" | grep -v '^AIGW__SERVER__LISTEN=')
  env_vars+=("AIGW__SERVER__LISTEN=127.0.0.1:$port")
  mapfile -t args < <(jq -r '.process.args[]' "$spec")
  user="$(jq -r '.process.user.uid' "$spec"):$(jq -r '.process.user.gid' "$spec")"
  [ "$(jq -r .process.cwd "$spec")" = / ] || die "the check runs the image in / only"
  log "check: chroot as $user, read-only, listen 127.0.0.1:$port, /data a fresh folder; args ${args[*]}"
  install -d -m 0750 -o "${user%:*}" -g "${user#*:}" "$work/data"
  install -d "$croot/proc" "$croot/dev"
  touch "$croot/etc/hosts" "$croot/etc/resolv.conf"
  # A private mount namespace: the image's files read-only (as deploy/k8s runs them), /proc,
  # a minimal /dev, a tmpfs /tmp, /data and the host's name files, mounted for this process
  # alone and gone with it. unshare, sh, env and chroot each exec the next, so $! ends up as
  # aigw's own PID.
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare --mount --propagation private -- sh -c '
    set -e
    root=$1; data=$2; shift 2
    mount --bind "$root" "$root"
    mount -o remount,bind,ro "$root"
    mount -t proc proc "$root/proc"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/tmp"
    mount -t tmpfs -o mode=0755,nosuid tmpfs "$root/dev"
    for d in null zero full random urandom tty; do
      touch "$root/dev/$d"; mount --bind "/dev/$d" "$root/dev/$d"
    done
    mount --bind "$data" "$root/data"
    mount --bind /etc/hosts "$root/etc/hosts"
    [ -e /etc/resolv.conf ] && mount --bind /etc/resolv.conf "$root/etc/resolv.conf"
    exec "$@"' sh "$croot" "$work/data" \
    env -i "${env_vars[@]}" "$(command -v chroot)" --userspec="$user" "$croot" "${args[@]}" \
    >"$work/aigw.log" 2>&1 &
  pid=$!
  logs() { tail -n 30 "$work/aigw.log" >&2; }
fi

alive() { kill -0 "$pid" 2>/dev/null; }
fail() { log "aigw's last log lines:"; logs || true; die "$*"; }
# req METHOD PATH [BODY] [BEARER]: sets $code, the body in $work/body.
req() {
  local args=(-sS -o "$work/body" -w '%{http_code}' --max-time 10 -X "$1" "$base$2")
  [ -n "${3:-}" ] && args+=(-H 'Content-Type: application/json' --data "$3")
  [ -n "${4:-}" ] && args+=(-H "Authorization: Bearer $4")
  code=$(curl "${args[@]}" 2>"$work/curl.err") || code=000
}
expect() {
  [ "$code" = "$1" ] || fail "$2: HTTP $code, expected $1: $(head -c 400 "$work/body" 2>/dev/null)"
  log "$2: $code"
}
rss() { awk '/^VmRSS/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$pid/status"; }

started=$(date +%s)
code=000
while [ "$code" != 200 ]; do
  alive || fail "aigw exited before it was ready"
  [ $(($(date +%s) - started)) -lt 60 ] || fail "GET /readyz not 200 within 60 s (last: $code)"
  sleep 0.5
  req GET /readyz
done
expect 200 "GET /readyz $(head -c 100 "$work/body")…"
run_uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$run_uid" = "$uid" ] || fail "aigw runs as uid $run_uid, not $uid"
root_opts=$(awk '$5 == "/" { o = $6 } END { print o }' "/proc/$pid/mountinfo")
case ",$root_opts," in *,ro,*) ;; *) fail "aigw's root file system is not read-only ($root_opts)" ;; esac
log "aigw runs as uid $run_uid, PID $pid, on a read-only root file system"
sleep 2
idle_rss=$(rss)
log "idle RSS (VmRSS) after start: $idle_rss"

email=image-check-$$@example.com
password="image check passphrase $RANDOM$RANDOM"
req POST /api/v1/auth/register "{\"email\":\"$email\",\"password\":\"$password\",\"name\":\"Check\"}"
expect 201 "POST /api/v1/auth/register"
req POST /api/v1/auth/login "{\"email\":\"$email\",\"password\":\"$password\"}"
expect 200 "POST /api/v1/auth/login"
token=$(jq -r .data.token "$work/body")
req POST /api/v1/auth/api-keys '{"name":"image-check","permissions":["ai_gateway"]}' "$token"
expect 201 "POST /api/v1/auth/api-keys (ai_gateway)"
key=$(jq -r .data.key "$work/body")
req POST /api/v1/ai/chat/completions '{"model":"echo","messages":[{"role":"user","content":"hi"}]}' "$key"
expect 200 "POST /api/v1/ai/chat/completions (echo)"
answer=$(jq -r '.choices[0].message.content' "$work/body")
[ "$answer" = hi ] || fail "the echo model answered $answer, not hi"
sleep 3
log "RSS (VmRSS) 3 s after those calls (the token counter's tables are loaded now): $(rss)"

log "stopping aigw (SIGTERM to PID $pid)"
if [ "$check" = podman ]; then
  podman "${podman_global[@]}" stop -t 40 "$ctr" >/dev/null
  status=$(podman inspect -f '{{.State.ExitCode}}' "$ctr")
  podman rm -f "$ctr" >/dev/null
  ctr=""
else
  kill -TERM "$pid"
  status=0
  wait "$pid" || status=$?
fi
pid=""
[ "$status" = 0 ] || fail "aigw exited with status $status after SIGTERM"
log "aigw stopped (exit status 0)"

log "OK: $archive"
log "    digest $manifest_digest, compressed $(mib "$compressed"), idle RSS $idle_rss (checked with $check)"
