#!/usr/bin/env bash
# Builds the libFuzzer targets with Debian's clang (-fsanitize=fuzzer,address,undefined) and
# runs each for a bounded time on its committed seed corpus (tests/fuzz/corpus/<target>/):
#   gguf_fuzz     runtime/gguf_file*.cpp + mapped_file.cpp + kernels/dtype.cpp
#   request_fuzz  server/openai_schema.cpp + chat_messages.cpp + json_fields.cpp + request_json.cpp
#                 + api_error.cpp
# Any crash, sanitizer report, leak, timeout or out-of-memory fails the test; the input that
# caused it is printed (hex) and kept under the build folder. New inputs the fuzzer finds go
# to the build folder too, never into the committed corpus.
#
# Environment: DELTASERVE_BUILD_DIR (ctest sets it), DELTASERVE_FUZZ_SECONDS (default 45 per
# target; both targets run at once, one core each), CXX_FUZZ (default clang++).
# Needs clang and libclang-rt-14-dev (scripts/setup.sh installs them). Run from the
# repository root: bash tests/fuzz/fuzz_ci.sh
set -euo pipefail

root=$(pwd)
build="${DELTASERVE_BUILD_DIR:-build/fuzz-local}/fuzz"
seconds="${DELTASERVE_FUZZ_SECONDS:-45}"
cxx="${CXX_FUZZ:-clang++}"
mkdir -p "$build/obj"

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz_ci: $cxx not found; run scripts/setup.sh (clang, libclang-rt-14-dev)" >&2
  exit 1
fi

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -I"$root"
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)

gguf_sources=(runtime/gguf_file.cpp runtime/gguf_file_getters.cpp runtime/mapped_file.cpp
              kernels/dtype.cpp tests/fuzz/gguf_fuzz.cpp)
request_sources=(server/openai_schema.cpp server/chat_messages.cpp server/json_fields.cpp
                 server/request_json.cpp server/json_nesting_scanner.cpp server/api_error.cpp
                 tests/fuzz/request_fuzz.cpp)

# Compiles each source once, two at a time; a source is rebuilt when it or any header of the
# folders the targets include from is newer than its object (a header of another folder, such
# as server/openai_schema.h for tests/fuzz/request_fuzz.cpp, changes the layouts it sees).
compile() {
  local pids=() src obj
  for src in "$@"; do
    obj="$build/obj/$(echo "$src" | tr '/' '_').o"
    if [[ ! -f "$obj" || "$src" -nt "$obj" ]] || find kernels runtime server tests/fuzz -name '*.h' -newer "$obj" | grep -q .; then
      "$cxx" "${flags[@]}" -c "$src" -o "$obj" &
      pids+=($!)
      if ((${#pids[@]} >= 2)); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}

link() {  # link <target> <sources...>
  local target=$1 objs=() src
  shift
  for src in "$@"; do objs+=("$build/obj/$(echo "$src" | tr '/' '_').o"); done
  "$cxx" "${flags[@]}" "${objs[@]}" -o "$build/$target"
}

echo "fuzz_ci: building with $("$cxx" --version | head -1)"
compile "${gguf_sources[@]}" "${request_sources[@]}"
link gguf_fuzz "${gguf_sources[@]}"
link request_fuzz "${request_sources[@]}"

# run <target> [extra libFuzzer flags...]: in the background; its log goes to $build/<target>.log
run() {
  local target=$1
  shift
  rm -rf "$build/work/$target" && mkdir -p "$build/work/$target" "$build/artifacts"
  "$build/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" "$@" \
    "$build/work/$target" "tests/fuzz/corpus/$target" >"$build/$target.log" 2>&1
}

echo "fuzz_ci: running gguf_fuzz and request_fuzz for ${seconds} s each"
status=0
run gguf_fuzz -max_len=4096 & gguf_pid=$!
run request_fuzz -max_len=2048 -dict=tests/fuzz/request.dict & request_pid=$!
wait "$gguf_pid" || status=1
wait "$request_pid" || status=1

for target in gguf_fuzz request_fuzz; do
  echo "---- $target: $(grep -E '^stat::number_of_executed_units' "$build/$target.log" || echo 'no stats')"
  grep -E '^#[0-9]+[[:space:]]+DONE' "$build/$target.log" || true
done
if ((status != 0)); then
  for target in gguf_fuzz request_fuzz; do
    echo "==== $target log (tail)"
    tail -n 60 "$build/$target.log"
  done
  for artifact in "$build"/artifacts/*; do
    [[ -f "$artifact" ]] || continue
    echo "==== reproducer $artifact (first 512 bytes, hex):"
    head -c 512 "$artifact" | od -An -tx1 | head -n 32
  done
  echo "fuzz_ci: FAILED (reproduce: $build/<target> <artifact>)" >&2
  exit 1
fi
echo "fuzz_ci: no finding"
