#!/usr/bin/env bash
# A lone client's lock cycle with the guest's halt polling off and on, alternating.
#
#   loadtest/scripts/halt_poll_ab.sh [-r ROUNDS] [-d SECONDS] [-p POLL_NS] BIN_DIR
#
# On a virtual machine whose guest kernel idles with the `haltpoll` cpuidle driver,
# /sys/module/haltpoll/parameters/guest_halt_poll_ns says how long an idle vCPU polls
# before it halts (0: never; the kernel's default is 200000), while `haltpoll` is the
# cpuidle governor. Each round sets it to 0 and to POLL_NS (default 200000), in turn
# (odd rounds 0 first, even rounds POLL_NS first), and under each: times 1,000 synced
# 4 KiB appends (`baton-loadtest machine`), then runs one client's lock cycles for
# SECONDS (default 8) against a fresh single node of BIN_DIR/baton with its defaults,
# one with the API on HTTP workers (`--http-workers 2`), and a fresh single etcd (from
# PATH). The setting found at the start is put back at the end, also on failure (not
# on SIGKILL); a failure prints the logs' tails. Needs root; the machine should be
# otherwise idle (busy vCPUs never halt, so the setting would not matter).
# BENCHMARKS.md, "The lone client and the guest's halt polling (session 66)".
set -euo pipefail

rounds=3 seconds=8 poll_ns=200000
while getopts "r:d:p:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    d) seconds=$OPTARG ;;
    p) poll_ns=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
bin_dir=${1:?usage: $0 [-r ROUNDS] [-d SECONDS] [-p POLL_NS] BIN_DIR}
baton=$bin_dir/baton loadtest=$bin_dir/baton-loadtest
knob=/sys/module/haltpoll/parameters/guest_halt_poll_ns
[[ -w $knob ]] || { echo "$knob is missing or not writable (the haltpoll driver, root)" >&2; exit 2; }
command -v etcd >/dev/null || { echo "no etcd on PATH" >&2; exit 2; }
for port in 17978 17979 17980; do
  if (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "something already listens on 127.0.0.1:$port; stop it first" >&2
    exit 1
  fi
done

original=$(cat "$knob")
server="" dir=""
cleanup() {
  local status=$?
  echo "$original" >"$knob" || true
  if [[ -n $server ]]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  if [[ -n $dir ]]; then
    if ((status != 0)); then
      for log in "$dir"/*.log; do
        [[ -f $log ]] && { echo "--- $log" >&2; tail -20 "$log" >&2; }
      done
    fi
    rm -rf "$dir"
  fi
  return "$status"
}
trap cleanup EXIT

wait_ready() {
  for _ in $(seq 100); do
    curl -fs "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "not ready: $1" >&2
  exit 1
}

# measure NAME PORT [--target-kind etcd]: one client's lock cycles against the server
# in $server, then stops it and prints one line.
measure() {
  local name=$1 port=$2
  shift 2
  "$loadtest" run --scenario lock-cycle --clients 1 --duration-s "$seconds" "$@" \
    --target "http://127.0.0.1:$port" --server-pid "$server" --report "$dir/$name.json" \
    >"$dir/$name.client.log" 2>&1
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""
  python3 - "$dir/$name.json" "$name" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
latency = report["latency_us"]
cores = report.get("server_cpu_cores")
print(f"  {sys.argv[2]:14} {report['throughput_per_s']:6.0f} cycles/s  p50 {latency['p50'] / 1000:5.3f} ms"
      f"  p99 {latency['p99'] / 1000:5.3f} ms  server {cores if cores is None else round(cores, 2)} cores")
PY
}

for round in $(seq "$rounds"); do
  order=(0 "$poll_ns")
  ((round % 2 == 0)) && order=("$poll_ns" 0)
  for ns in "${order[@]}"; do
    echo "$ns" >"$knob"
    echo "round $round, guest_halt_poll_ns = $ns"
    dir=$(mktemp -d -p /var/tmp)
    "$loadtest" machine --dir "$dir" --samples 1000 | python3 -c '
import json, sys
fsync = json.load(sys.stdin)["fsync"]
print("  synced 4 KiB append p50 %d µs, mean %.0f µs" % (fsync["p50_us"], fsync["mean_us"]))'
    for mode in default workers; do
      extra=()
      [[ $mode == workers ]] && extra=(--http-workers 2)
      "$baton" serve --listen 127.0.0.1:17978 --raft-listen 127.0.0.1:0 --data-dir "$dir/$mode" \
        "${extra[@]}" >"$dir/$mode.log" 2>&1 &
      server=$!
      wait_ready http://127.0.0.1:17978/readyz
      measure "baton-$mode" 17978
    done
    # The flags `baton-loadtest bench` starts etcd with (loadtest/src/process.rs).
    etcd --name bench --data-dir "$dir/etcd" \
      --listen-client-urls http://127.0.0.1:17979 --advertise-client-urls http://127.0.0.1:17979 \
      --listen-peer-urls http://127.0.0.1:17980 --initial-advertise-peer-urls http://127.0.0.1:17980 \
      --initial-cluster bench=http://127.0.0.1:17980 --initial-cluster-state new \
      --initial-cluster-token baton-loadtest --quota-backend-bytes 8589934592 \
      --logger zap --log-level warn >"$dir/etcd.log" 2>&1 &
    server=$!
    wait_ready http://127.0.0.1:17979/health
    measure etcd 17979 --target-kind etcd
    rm -rf "$dir"
    dir=""
  done
done
