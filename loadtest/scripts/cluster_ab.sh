#!/usr/bin/env bash
# Builds of Baton side by side on a 3-node cluster on loopback, alternating.
#
#   loadtest/scripts/cluster_ab.sh [-r ROUNDS] [-d SECONDS] [-s "SCENARIO:CLIENTS ..."] [-l MS] NAME=DIR [NAME=DIR ...] [-- LEADER_FLAGS...]
#
# DIR holds a `baton` and a `baton-loadtest` binary (copy them out of the target
# directory after each build). Each round starts a fresh cluster of every build
# in turn (node 1 initializes it and leads), runs each scenario against the
# leader for SECONDS (default 10) and prints one line per run: throughput, p50,
# p99, and the leader's CPU per operation. One binary's figures spread by up to
# 20 % between rounds on a shared 2-core machine: run an A/A pair (the same DIR
# twice) to see the spread before believing a difference. Defaults: 2 rounds,
# "lock-contended:32 lock-cycle:1". LEADER_FLAGS go to
# node 1 only (for example --unsafe-no-fsync, to see what the leader's own sync
# costs). -l MS puts a delay_proxy.py between the leader and each follower
# (MS each way, at least: nodes on separate hosts); clients still reach the
# leader directly. Compare medians over the rounds: the machine is shared.
set -euo pipefail

rounds=2 seconds=10 scenarios="lock-contended:32 lock-cycle:1" link_ms=""
while getopts "r:d:s:l:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    l) link_ms=$OPTARG ;;
    d) seconds=$OPTARG ;;
    s) scenarios=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
builds=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do builds+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
leader_flags=("$@")
[ ${#builds[@]} -gt 0 ] || { sed -n '2,15p' "$0"; exit 2; }

# Eight distinct free ports from one process (two picks of port 0 in two processes
# can return the same port).
ports() {
  python3 -c '
import socket
picked = []
while len(picked) < 8:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p not in picked: picked.append(p)
print(*picked)'
}

run_build() {
  local name=$1 dir=$2 work pids=() api=() raft=() peers="" leader_pid=""
  work=$(mktemp -d)
  local picked
  read -r -a picked <<<"$(ports)"
  for i in 1 2 3; do api[i]=${picked[i - 1]}; raft[i]=${picked[i + 2]}; done
  for i in 1 2 3; do peers+="${peers:+,}$i=http://127.0.0.1:${raft[i]}"; done
  local dial=()
  if [ -n "$link_ms" ]; then
    for i in 2 3; do
      python3 "$(dirname "$0")/delay_proxy.py" "${picked[i + 4]}" "${raft[i]}" "$link_ms" &
      pids+=($!)
    done
    dial=(--peer-dial "2=http://127.0.0.1:${picked[6]},3=http://127.0.0.1:${picked[7]}")
  fi
  for i in 1 2 3; do
    local extra=()
    [ "$i" = 1 ] && extra=("${dial[@]}" "${leader_flags[@]}")
    "$dir/baton" serve --listen "127.0.0.1:${api[i]}" --raft-listen "127.0.0.1:${raft[i]}" \
      --data-dir "$work/node-$i" --node-id "$i" --peers "$peers" --cluster-secret cluster-ab \
      --insecure-plaintext-peers "${extra[@]}" >"$work/node-$i.log" 2>&1 &
    pids+=($!)
    if [ "$i" = 1 ]; then leader_pid=$!; fi
  done
  local base="http://127.0.0.1:${api[1]}" leader=""
  for _ in $(seq 1 150); do
    leader=$(curl -fs "$base/v1/cluster" 2>/dev/null | python3 -c 'import sys,json; print(json.load(sys.stdin).get("leader_id") or "")' 2>/dev/null || true)
    [ -n "$leader" ] && break
    sleep 0.2
  done
  if [ "$leader" != 1 ]; then
    echo "$name: node 1 does not lead (leader: ${leader:-none}); skipped"
  else
    for sc in $scenarios; do
      local report
      report=$("$dir/baton-loadtest" run --scenario "${sc%%:*}" --target "$base" \
        --clients "${sc##*:}" --duration-s "$seconds" --server-pid "$leader_pid" 2>/dev/null)
      python3 - "$name" "$sc" "$report" <<'EOF'
import json, sys
name, sc, text = sys.argv[1:]
r = json.loads(text[text.index("{"):])
lat = r.get("latency_us") or r.get("latency") or {}
cores = r.get("server_cpu_cores") or 0
per_op = cores * 1e6 / r["throughput_per_s"] if r["throughput_per_s"] else 0
print(f"{name:10} {sc:18} {r['throughput_per_s']:8.0f} ops/s  p50 {lat.get('p50', 0) / 1000:6.2f} ms  p99 {lat.get('p99', 0) / 1000:6.2f} ms  leader {per_op:6.1f} µs/op  errors {r.get('errors', 0)}")
EOF
    done
  fi
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work"
}

for round in $(seq 1 "$rounds"); do
  echo "round $round"
  for build in "${builds[@]}"; do run_build "${build%%=*}" "${build#*=}"; done
done
