#!/usr/bin/env bash
# Resident memory of aigw with every connection slot held by a stalled upload:
# starts the binary with `server.max_connections = N`, opens N connections that each send a
# request head and part of a body and then stall, and prints VmRSS/VmHWM while they are held,
# whether one more client is served, and how many of the N were cut after
# `server.body_read_timeout_secs`. Loopback only; stops by itself.
#
#   scripts/conn_cap.sh [N (default: the built-in default, 1024)] [binary (default target/release/aigw)] [body bytes sent before stalling (default 4000; 64000 is the worst case of an account endpoint)]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1024}
bin=${2:-target/release/aigw}
sent=${3:-4000}
[ -x "$bin" ] || cargo build --release --quiet
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ulimit -n $((n * 2 + 1024)) 2>/dev/null || true
# Every connection comes from 127.0.0.1: the per-address caps are off, the process's is measured.
(cd "$work" && AIGW__SERVER__LISTEN="127.0.0.1:$port" AIGW__SERVER__MAX_CONNECTIONS="$n" \
  AIGW__SERVER__MAX_CONNECTIONS_PER_ADDRESS=0 AIGW__SERVER__MAX_PENDING_REQUESTS_PER_ADDRESS=0 \
  AIGW__LOG__LEVEL=warn AIGW__RATE_LIMIT__ENABLED=false exec "$OLDPWD/$bin" >"$work/server.log" 2>&1) &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
rss() { awk '/^(VmRSS|VmHWM)/ { printf "%s %d MB  ", $1, $2 / 1024 }' "/proc/$pid/status"; echo; }
echo "idle:          $(rss)"
python3 - "$port" "$n" "$pid" "$sent" <<'PY'
import socket, sys, time
port, n, pid, sent = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def rss():
    fields = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status"))
    return " ".join(f"{k} {int(fields[k].split()[0]) // 1024} MB" for k in ("VmRSS", "VmHWM"))
head = (b"POST /api/v1/auth/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 65000\r\n\r\n" + b'{"email":"' + b"x" * sent)
socks = []
started = time.time()
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(head)
    socks.append(s)
time.sleep(2)
print(f"{n} stalled uploads held ({time.time() - started:.1f} s to open): {rss()}")
probe = socket.create_connection(("127.0.0.1", port))
probe.settimeout(2)
probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
try:
    served = probe.recv(100).startswith(b"HTTP/1.1 200")
except socket.timeout:
    served = False
print(f"one more client served while the cap is held: {served} (expected False: it waits in the backlog)")
deadline = time.time() + 30
cut = 0
for s in socks:
    s.settimeout(max(0.1, deadline - time.time()))
    try:
        data = s.recv(200)
        cut += 1 if data.startswith(b"HTTP/1.1 408") or data == b"" else 0
    except (socket.timeout, ConnectionResetError):
        pass
print(f"cut by the body read timeout: {cut} of {n}; after: {rss()}")
probe.settimeout(5)
try:
    print("healthz after the cut:", probe.recv(100).split(b"\r\n")[0].decode())
except socket.timeout:
    print("healthz after the cut: no answer")
PY
