#!/usr/bin/env bash
# Local round trips awake vs asleep (local/framed_socket.h SetSpin): two
# ptstored side by side, one with [server] spin_us = 50 (the default) and one
# with 0, and bench_save_lookup's lookup rows against each in turn, the
# client spinning (ClientOptions::spin_us = 50) or not ($PTSTORE_SPIN_US=0).
#
#   bench/rpc_spin.sh [ROUNDS]      # default 3 rounds, ~1 min; build/ first
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
dir=$(mktemp -d /tmp/ptstore-rpc-spin.XXXXXX)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for spin in 50 0; do
  printf '[server]\nspin_us = %s\n' "$spin" > "$dir/spin$spin.toml"
  build/storage/ptstored -s "$dir/spin$spin.sock" --arena-size 1GiB -c "$dir/spin$spin.toml" > "$dir/spin$spin.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 100); do [ -S "$dir/spin50.sock" ] && [ -S "$dir/spin0.sock" ] && break; sleep 0.1; done
for r in $(seq "$rounds"); do
  for spin in 50 0; do
    echo "== round $r: spin_us=$spin (server and client)"
    PTSTORE_SPIN_US=$spin build/bench/bench_save_lookup --socket "$dir/spin$spin.sock" --save-reps 1 |
      grep -E "^operation|^Stats RPC|^chain keys|^Lookup"
  done
done
