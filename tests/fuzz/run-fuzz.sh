#!/usr/bin/env bash
# Builds the wire-format fuzzer (libFuzzer + ASan + UBSan) and runs it for a
# bounded time on a generated seed corpus.
#
#   tests/fuzz/run-fuzz.sh [OUT_DIR]      (default /tmp/ptstore-fuzz)
#
# Environment:
#   FUZZ_SECONDS   how long to fuzz (default 20)
#   FUZZ_CXX       the clang++ to use (default clang++)
#   FUZZ_ARGS      extra libFuzzer flags (e.g. "-jobs=4 -workers=4")
#
# OUT_DIR gets the binaries (rebuilt only when a source is newer), seeds/
# (regenerated each run), corpus/ (kept between runs: coverage accumulates)
# and artifacts/ (crashing inputs). Exit status: 0 when the run finished
# without a finding, 1 on a crash, a sanitizer report, a violated property or
# a build failure, 77 when clang++ is missing (ctest reports a skip).
# Reproduce a finding with: OUT_DIR/wire_fuzz OUT_DIR/artifacts/crash-...
set -euo pipefail

out=${1:-/tmp/ptstore-fuzz}
seconds=${FUZZ_SECONDS:-20}
cxx=${FUZZ_CXX:-clang++}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "run-fuzz: $cxx not found; skipping" >&2
  exit 77
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)

core_srcs=(core/status.cc core/layout.cc core/keys.cc core/types.cc core/wire.cc core/wire_types.cc core/messages.cc
           core/message_registry.cc core/peer_messages.cc)
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
       -I"$root/include" -I"$root")
libs=(-lxxhash)

# Rebuild `bin` when it is missing or older than any input.
stale() {
  local bin=$1; shift
  [[ -x $bin ]] || return 0
  local f
  for f in "$@" "$0" "$root"/core/*.h "$root"/include/ptstore/*.h; do
    [[ $f -nt $bin ]] && return 0
  done
  return 1
}

build() {
  local bin=$1 sanitize=$2; shift 2
  local srcs=("$@")
  local abs=() s
  for s in "${srcs[@]}" "${core_srcs[@]}"; do abs+=("$root/$s"); done
  if stale "$bin" "${abs[@]}"; then
    echo "run-fuzz: building $(basename "$bin")" >&2
    "$cxx" "${flags[@]}" "$sanitize" -o "$bin.tmp" "${abs[@]}" "${libs[@]}"
    mv "$bin.tmp" "$bin"
  fi
}

start=$(date +%s)
build "$out/wire_fuzz" -fsanitize=fuzzer tests/fuzz/wire_fuzz.cc || { echo "run-fuzz: build failed" >&2; exit 1; }
build "$out/make_corpus" -fno-sanitize=fuzzer tests/fuzz/make_corpus.cc || { echo "run-fuzz: build failed" >&2; exit 1; }
built=$(date +%s)

rm -rf "$out/seeds"
mkdir -p "$out/seeds" "$out/corpus" "$out/artifacts"
"$out/make_corpus" "$out/seeds"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Inputs are at most 4 KiB, so any allocation near 64 MiB is a decoder
# trusting a hostile count: -malloc_limit_mb makes that a finding.
# libFuzzer's default error exit code is 77, ctest's "skipped": pin it to 1.
rc=0
# shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
"$out/wire_fuzz" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=64 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
  -artifact_prefix="$out/artifacts/" ${FUZZ_ARGS:-} "$out/corpus" "$out/seeds" || rc=$?
end=$(date +%s)

echo "run-fuzz: build $((built - start)) s, fuzz $((end - built)) s, corpus $(find "$out/corpus" -type f | wc -l) inputs" >&2
if [[ $rc -ne 0 ]]; then
  echo "run-fuzz: FAILED (exit $rc); crashing inputs:" >&2
  ls -l "$out/artifacts" >&2 || true
  exit 1
fi
echo "run-fuzz: no findings" >&2
