#!/usr/bin/env bash
# Server CPU per operation of one or more Baton builds, side by side.
#
#   loadtest/scripts/cpu_per_op.sh [-r ROUNDS] [-c CLIENTS] [-d SECONDS] NAME=BATON_BIN [NAME=BATON_BIN ...] [-- SERVE_ARGS...]
#
# Each round runs `baton-loadtest run --scenario lock-cycle` against a fresh
# single node of every build in turn (alternating, so a noisy neighbour hurts
# them alike), and prints per run: throughput, p99, the server's CPU (from
# /proc/PID/stat) per operation, and, when `perf` can count syscall
# tracepoints, system calls and context switches per request and fsyncs.
# Compare medians over the rounds, not single runs: the machine is shared.
#
# BATON_LOADTEST overrides the load-test binary (default: the one `make build`
# puts next to the first Baton binary).
set -euo pipefail

rounds=3 clients=64 seconds=10
while getopts "r:c:d:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    c) clients=$OPTARG ;;
    d) seconds=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))

builds=()
while [[ $# -gt 0 && $1 != "--" ]]; do builds+=("$1"); shift; done
[[ ${1:-} == "--" ]] && shift
serve_args=("$@")
if [[ ${#builds[@]} -eq 0 ]]; then
  sed -n '2,15p' "$0"
  exit 2
fi

first_bin=${builds[0]#*=}
loadtest=${BATON_LOADTEST:-$(dirname "$first_bin")/baton-loadtest}
if [[ ! -x $loadtest ]]; then
  echo "no load-test binary at $loadtest (set BATON_LOADTEST)" >&2
  exit 2
fi
port=17978
server=""
trap '[[ -n $server ]] && kill "$server" 2>/dev/null; true' EXIT
use_perf=0
if perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then use_perf=1; fi

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

one_run() {
  local name=$1 bin=$2 dir
  dir=$(mktemp -d)
  "$bin" serve --listen "127.0.0.1:$port" --raft-listen 127.0.0.1:0 --data-dir "$dir/data" \
    "${serve_args[@]}" >"$dir/server.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  if ! kill -0 "$server" 2>/dev/null; then
    echo "$name: the server exited; its log:" >&2
    cat "$dir/server.log" >&2
    exit 1
  fi
  "$loadtest" run --scenario lock-cycle --clients "$clients" --duration-s "$seconds" \
    --target "http://127.0.0.1:$port" --report "$dir/report.json" 2>/dev/null &
  local client=$!
  # Measure the middle of the run: skip the clients' lease set-up.
  local window=$((seconds - 4))
  sleep 2
  local c0 c1
  c0=$(cpu_ticks "$server")
  if [[ $use_perf == 1 ]]; then
    timeout -s INT "$window" perf stat -x, -e raw_syscalls:sys_enter -e context-switches \
      -e syscalls:sys_enter_fdatasync -e syscalls:sys_enter_fsync -p "$server" -o "$dir/perf" \
      >/dev/null 2>&1 || true
  else
    sleep "$window"
  fi
  c1=$(cpu_ticks "$server")
  wait "$client"
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""
  python3 - "$dir" "$name" "$c0" "$c1" "$window" <<'PY'
import json, sys
d, name, c0, c1, window = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
report = json.load(open(f"{d}/report.json"))
ops = report["throughput_per_s"]
cores = (c1 - c0) / 100 / window
counts = {}
try:
    for line in open(f"{d}/perf"):
        parts = line.strip().split(",")
        if len(parts) > 2 and parts[0].replace(".", "").isdigit():
            counts[parts[2]] = float(parts[0])
except FileNotFoundError:
    pass
line = (f"{name:12} {ops:8.0f} ops/s  p99 {report['latency_us']['p99'] / 1000:6.2f} ms  "
        f"server {cores:4.2f} cores = {cores * 1e6 / ops:6.1f} µs/op")
if counts:
    requests = ops * 2 * window  # a lock cycle is two requests
    fsyncs = counts.get("syscalls:sys_enter_fdatasync", 0) + counts.get("syscalls:sys_enter_fsync", 0)
    line += (f"  syscalls/request {counts.get('raw_syscalls:sys_enter', 0) / requests:4.2f}"
             f"  context switches/request {counts.get('context-switches', 0) / requests:4.2f}"
             f"  fsyncs/s {fsyncs / window:6.0f}")
print(line, flush=True)
PY
  rm -rf "$dir"
}

for round in $(seq "$rounds"); do
  echo "round $round"
  for build in "${builds[@]}"; do
    one_run "${build%%=*}" "${build#*=}"
  done
done
