#!/usr/bin/env bash
# Server CPU per operation of one or more Baton builds, side by side.
#
#   loadtest/scripts/cpu_per_op.sh [-r ROUNDS] [-c CLIENTS] [-d SECONDS] NAME=BATON_BIN [NAME=BATON_BIN ...] [-- SERVE_ARGS...]
#
# Each round runs lock-cycle against a fresh single node of every build in turn
# (alternating, so a noisy neighbour hurts them alike). Per build and round:
#  1. a measured run of SECONDS (default 10): throughput, p99 and the server's CPU
#     per operation over exactly the measured phase (`baton-loadtest run --server-pid`);
#  2. when `perf` can count syscall tracepoints, a second run of 6 s on the same
#     server with `perf stat` attached for 3 s: system calls and context switches
#     per request, fsyncs per second. It is separate because counting a tracepoint on
#     every system call costs CPU, which would inflate the first run's figure.
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
if ((seconds < 2)); then
  echo "-d must be at least 2 seconds" >&2
  exit 2
fi

builds=()
while [[ $# -gt 0 && $1 != "--" ]]; do builds+=("$1"); shift; done
[[ ${1:-} == "--" ]] && shift
serve_args=("$@")
if [[ ${#builds[@]} -eq 0 ]]; then
  sed -n '2,17p' "$0"
  exit 2
fi

first_bin=${builds[0]#*=}
loadtest=${BATON_LOADTEST:-$(dirname "$first_bin")/baton-loadtest}
if [[ ! -x $loadtest ]]; then
  echo "no load-test binary at $loadtest (set BATON_LOADTEST)" >&2
  exit 2
fi
port=17978
if curl -s -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
  echo "something already listens on 127.0.0.1:$port; stop it first" >&2
  exit 1
fi
use_perf=0
if perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then use_perf=1; fi

server="" client="" dir=""
cleanup() {
  [[ -n $client ]] && kill "$client" 2>/dev/null
  [[ -n $server ]] && kill "$server" 2>/dev/null
  [[ -n $dir ]] && rm -rf "$dir"
  true
}
trap cleanup EXIT

fail() {
  echo "$1" >&2
  for log in "$dir"/*.log; do
    [[ -f $log ]] && { echo "--- $log" >&2; tail -20 "$log" >&2; }
  done
  exit 1
}

one_run() {
  local name=$1 bin=$2
  dir=$(mktemp -d)
  "$bin" serve --listen "127.0.0.1:$port" --raft-listen 127.0.0.1:0 --data-dir "$dir/data" \
    "${serve_args[@]}" >"$dir/server.log" 2>&1 &
  server=$!
  local ready=0
  for _ in $(seq 100); do
    if curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  ((ready)) || fail "$name: the server did not become ready"

  "$loadtest" run --scenario lock-cycle --clients "$clients" --duration-s "$seconds" \
    --target "http://127.0.0.1:$port" --server-pid "$server" --report "$dir/measured.json" \
    >"$dir/client.log" 2>&1 || fail "$name: the measured run failed"

  if [[ $use_perf == 1 ]]; then
    "$loadtest" run --scenario lock-cycle --clients "$clients" --duration-s 6 \
      --target "http://127.0.0.1:$port" --report "$dir/counted.json" >"$dir/counted.log" 2>&1 &
    client=$!
    sleep 2
    timeout -s INT 3 perf stat -x, -e raw_syscalls:sys_enter -e context-switches \
      -e syscalls:sys_enter_fdatasync -e syscalls:sys_enter_fsync -p "$server" -o "$dir/perf" \
      >/dev/null 2>&1 || true
    wait "$client" || fail "$name: the counted run failed"
    client=""
  fi
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""
  python3 - "$dir" "$name" <<'PY'
import json, os, sys
d, name = sys.argv[1], sys.argv[2]
measured = json.load(open(f"{d}/measured.json"))
ops = measured["throughput_per_s"]
cores = measured.get("server_cpu_cores")
latency = measured["latency_us"]
line = f"{name:12} {ops:8.0f} ops/s  p50 {latency['p50'] / 1000:6.2f} ms  p99 {latency['p99'] / 1000:6.2f} ms"
if ops > 0 and cores is not None:
    line += f"  server {cores:4.2f} cores = {cores * 1e6 / ops:6.1f} µs/op"
if os.path.exists(f"{d}/perf") and os.path.exists(f"{d}/counted.json"):
    counts = {}
    for row in open(f"{d}/perf"):
        parts = row.strip().split(",")
        if len(parts) > 2 and parts[0].replace(".", "").isdigit():
            counts[parts[2]] = float(parts[0])
    window = 3.0
    requests = json.load(open(f"{d}/counted.json"))["throughput_per_s"] * 2 * window  # a lock cycle is two requests
    fsyncs = counts.get("syscalls:sys_enter_fdatasync", 0) + counts.get("syscalls:sys_enter_fsync", 0)
    if requests > 0 and counts:
        line += (f"  syscalls/request {counts.get('raw_syscalls:sys_enter', 0) / requests:4.2f}"
                 f"  context switches/request {counts.get('context-switches', 0) / requests:4.2f}"
                 f"  fsyncs/s {fsyncs / window:6.0f}")
print(line, flush=True)
PY
  rm -rf "$dir"
  dir=""
}

for round in $(seq "$rounds"); do
  echo "round $round"
  for build in "${builds[@]}"; do
    one_run "${build%%=*}" "${build#*=}"
  done
done
