#!/usr/bin/env bash
# Server instructions per lock cycle of one or more Baton builds, counted by
# callgrind: repeatable whatever else the machine is doing, unlike CPU time.
#
#   loadtest/scripts/instructions_per_op.sh NAME=BATON_BIN [NAME=BATON_BIN ...]
#
# Each build serves two runs of lock-cycle (4 clients) under valgrind's callgrind,
# of SHORT and LONG operations (default 500 and 3000); the difference of the two
# totals over LONG - SHORT cycles is the per-cycle count, so start-up and
# shutdown cancel out. The builds run side by side (callgrind counts are not
# disturbed by load). BATON_LOADTEST overrides the load-test binary (default: the
# one next to the first Baton binary). KEEP=DIR keeps each run's callgrind.out
# there (DIR/NAME-OPS/callgrind.out), for `callgrind_annotate` per function.
set -euo pipefail

short=${SHORT:-500} long=${LONG:-3000}
if [[ $# -eq 0 ]]; then
  sed -n '2,12p' "$0"
  exit 2
fi
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
first_bin=${1#*=}
loadtest=${BATON_LOADTEST:-$(dirname "$first_bin")/baton-loadtest}
[[ -x $loadtest ]] || { echo "no load tool at $loadtest (set BATON_LOADTEST)" >&2; exit 2; }
if [[ -n ${KEEP:-} ]]; then
  work=$KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/baton-instructions-XXXX)
  trap 'rm -rf "$work"' EXIT
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

count() { # NAME BIN OPS -> prints the callgrind total
  local name=$1 bin=$2 ops=$3 port raft dir pid
  port=$(free_port) raft=$(free_port) dir=$work/$name-$ops
  mkdir -p "$dir"
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" "$bin" serve \
    --listen "127.0.0.1:$port" --raft-listen "127.0.0.1:$raft" --data-dir "$dir/data" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    sleep 0.2
  done
  local ran=0
  "$loadtest" run --scenario lock-cycle --target "http://127.0.0.1:$port" --clients 4 \
    --operations "$ops" --no-progress --report "$dir/report.json" >"$dir/loadtest.log" 2>&1 || ran=$?
  kill -TERM "$pid"
  wait "$pid" || true
  # A failed run would leave a count of start-up and shutdown only: stop instead.
  if (( ran != 0 )); then
    echo "$name: the load test of $ops cycles failed:" >&2
    tail -5 "$dir/loadtest.log" >&2
    return 1
  fi
  grep -E '^(summary|totals):' "$dir/callgrind.out" | head -1 | awk '{print $2}'
}

pids=()
for build in "$@"; do
  name=${build%%=*} bin=${build#*=}
  (
    a=$(count "$name" "$bin" "$short")
    b=$(count "$name" "$bin" "$long")
    echo "$name $(( (b - a) / (long - short) )) instructions per lock cycle ($short and $long cycles: $a, $b)"
  ) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
exit $status
