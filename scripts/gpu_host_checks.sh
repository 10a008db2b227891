#!/usr/bin/env bash
# Runs the GPU checks on a GPU host from a bundle made here (scripts/bundle_gpu.sh): kernel
# parity, GpuBackend vs CpuBackend, kernel and decode benchmarks, and a serving soak on the
# GPU backend. Each stage has its own time limit and log; a failing stage does not stop the
# later ones. Usage, from the repository root on the GPU host:
#   scripts/gpu_host_checks.sh BUNDLE_DIR LOG_DIR [stage...]
# stages: kernels kernels_quick backend kbench decode_tiny decode_35b decode_35b_eager verify_35b prefill_35b serve soak
#         sanitize sanitize_serve speculation decode_27b trace_35b matvec_ab compare constrained
#         served prefix_served gdn_prefill
# (matvec_ab: 35B-A3B and 27B decode with --matvec fma and --matvec tensor, side by side)
# (decode_35b_eager: decode_35b with the step graphs off, --step-graphs off)
# (compare: the decode and prefill figures of the 35B-A3B and 27B presets, 1/16/64 streams and a
#  512-token prompt, one table each; run it with two bundles in one call to compare builds)
# (constrained: bench/gpu_constrained.sh; served / prefix_served: bench/gpu_served.sh's decode
#  part / prefix-cache part on the 35B-A3B preset written as a GGUF)
# (gdn_prefill: the chunked GDN prefill's parity, tensor-core and FMA chunk passes, under
#  memcheck too, its kernel timings, and the 35B-A3B prefill at 512 / 4k / 32k tokens with
#  --gdn-prefill chunked and recurrent side by side)
# (default: all but soak and sanitize)
set -u
bundle=${1:?bundle dir}
logs=${2:?log dir}
shift 2
stages=("$@")
((${#stages[@]})) || stages=(kernels backend kbench decode_tiny decode_35b serve)
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$logs"
cli="$bundle/cli/deltaserve"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  git rev-parse --short HEAD 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
} | tee "$logs/device.txt"

run_stage() {  # run_stage NAME LIMIT_S COMMAND...: log to $logs/NAME.log, print the tail
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc after $((SECONDS - start)) s"
  tail -n "${TAIL_LINES:-15}" "$logs/$name.log"
}

# The daemon under compute-sanitizer memcheck (GPU backend, embedded model) serving 200 mixed
# requests from deltaserve-load, then SIGTERM: the sanitizer's summary must say 0 errors.
sanitized_serving() {
  local bundle=$1 dir
  dir=$(mktemp -d)
  compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    "$bundle/cli/deltaserve" serve --device cuda --port 0 --port-file "$dir/port" --max-streams 8 --log-level warn &
  local pid=$!
  for _ in $(seq 1 1200); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  local url="http://127.0.0.1:$(cat "$dir/port")"
  for _ in $(seq 1 1200); do curl -sf "$url/ready" >/dev/null && break; sleep 0.1; done
  "$bundle/loadtest/deltaserve-load" --url "$url" --concurrency 8 --requests 200 --endpoint mixed \
    --input-tokens 48 --output-tokens 32 --seed 3 --quiet
  local load_status=$?
  # SIGTERM to the daemon itself (the sanitizer's child): the sanitizer must live on to
  # print its leak and error summary after the daemon's drain.
  pkill -TERM -P "$pid" || kill -TERM "$pid"
  wait "$pid"
  local status=$?
  echo "load tool exit $load_status; daemon (under compute-sanitizer) exit $status"
  ((load_status == 0 && status == 0))
}

export -f sanitized_serving

for stage in "${stages[@]}"; do
  case $stage in
    kernels) run_stage kernels "${KERNELS_S:-240}" "$bundle/kernels/gpu_kernel_tests" --verbose ;;
    kernels_quick) run_stage kernels_quick "${KERNELS_S:-240}" "$bundle/kernels/gpu_kernel_tests" --quick ;;
    backend) run_stage backend "${BACKEND_S:-240}" "$bundle/tests/gpu_backend_tests" --gtest_color=no --gtest_print_time=1 ;;
    kbench) run_stage kbench 120 "$bundle/kernels/gpu_kernel_tests" --bench ;;
    decode_tiny) run_stage decode_tiny 60 "$cli" bench decode --preset tiny-moe --weights q8_0 --device cuda --batch 1,4,16,64 --steps 50 ;;
    decode_35b) run_stage decode_35b 240 "$cli" bench decode --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --batch 1,4,16,64 --context 1024 --steps 20 ;;
    prefill_35b) run_stage prefill_35b 150 "$cli" bench prefill --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --prompt 512,2048 --steps 3 ;;
    decode_27b) run_stage decode_27b "${DECODE27_S:-300}" "$cli" bench decode --preset qwen3.6-27b --weights q4_0 --device cuda --batch 1,64 --context 512 --steps 10 ;;
    kbench_matvec) run_stage kbench_matvec 60 "$bundle/kernels/gpu_kernel_tests" --bench-matvec ;;
    decode_35b_eager) run_stage decode_35b_eager 240 "$cli" bench decode --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --batch 1,4,16,64 --context 1024 --steps 20 --step-graphs off ;;
    serve)
      DELTASERVE_BUILD_DIR="$bundle" DELTASERVE_SOAK_REQUESTS="${SERVE_REQUESTS:-1000}" DELTASERVE_SOAK_OUT="$logs/serve" \
        DELTASERVE_SOAK_SERVE_ARGS="--device cuda" DELTASERVE_SOAK_MAX_S="${SERVE_S:-200}" run_stage serve "$((${SERVE_S:-200} + 80))" bash tests/soak/soak_ci.sh ;;
    soak)
      DELTASERVE_BUILD_DIR="$bundle" DELTASERVE_SOAK_REQUESTS="${SOAK_REQUESTS:-10000}" DELTASERVE_SOAK_OUT="$logs/soak" \
        DELTASERVE_SOAK_SERVE_ARGS="--device cuda" DELTASERVE_SOAK_CONCURRENCY=12 DELTASERVE_SOAK_MAX_S=480 \
        run_stage soak 560 bash tests/soak/soak_ci.sh ;;
    sanitize)
      run_stage memcheck 200 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
        "$bundle/tests/gpu_backend_tests" --gtest_filter="${SANITIZE_FILTER:-*}" ;;
    sanitize_serve) run_stage sanitize_serve 300 bash -c 'sanitized_serving "$0"' "$bundle" ;;
    speculation) run_stage speculation "${SPEC_S:-400}" bash bench/gpu_speculation.sh "$bundle" "$logs/speculation" ;;
    trace_35b)  # where the time goes, per kernel class (eager), decode at 1 and 64 streams and a 512-token prefill
      run_stage trace_decode_35b 150 "$cli" bench decode --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --batch 1,64 --context 1024 --steps 5 --trace
      run_stage trace_prefill_35b 100 "$cli" bench prefill --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --prompt 512 --steps 2 --trace ;;
    verify_35b)  # the cost of a verify step with 1 + d rows per stream (all kept) vs a plain step
      for rows in 1 2 3 4; do
        run_stage "verify_35b_rows$rows" 150 "$cli" bench decode --preset qwen3.6-35b-a3b --weights q4_0 \
          --device cuda --batch 1,64 --context 512 --steps 10 --draft-rows "$rows" --accept "$rows"
      done ;;
    matvec_ab)  # the Q4_0 decode matvec on the CUDA cores and on the tensor cores, one binary
      for m in fma tensor; do
        run_stage "decode_35b_$m" 150 "$cli" bench decode --preset qwen3.6-35b-a3b --weights q4_0 --device cuda \
          --batch 1,4,16,64 --context 1024 --steps 10 --matvec "$m"
        run_stage "decode_27b_$m" 150 "$cli" bench decode --preset qwen3.6-27b --weights q4_0 --device cuda \
          --batch 1,64 --context 512 --steps 10 --matvec "$m"
      done ;;
    compare)  # the decode and prefill figures a change must keep (35B-A3B and 27B, 1/16/64 streams, prompt 512)
      run_stage compare_decode_35b 240 "$cli" bench decode --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --batch 1,16,64 --context 1024 --steps 20
      run_stage compare_decode_27b "${DECODE27_S:-300}" "$cli" bench decode --preset qwen3.6-27b --weights q4_0 --device cuda --batch 1,16,64 --context 512 --steps 10
      run_stage compare_prefill_35b 150 "$cli" bench prefill --preset qwen3.6-35b-a3b --weights q4_0 --device cuda --prompt 512 --steps 3
      run_stage compare_prefill_27b 200 "$cli" bench prefill --preset qwen3.6-27b --weights q4_0 --device cuda --prompt 512 --steps 3 ;;
    constrained) run_stage constrained 200 bash bench/gpu_constrained.sh "$bundle" "$logs/constrained" ;;
    served) PARTS=decode run_stage served "${SERVED_S:-420}" bash bench/gpu_served.sh "$bundle" "$logs/served" ;;
    prefix_served) PARTS=prefix run_stage prefix_served "${SERVED_S:-420}" bash bench/gpu_served.sh "$bundle" "$logs/prefix_served" ;;
    gdn_prefill)
      run_stage gdn_prefill_parity 300 "$bundle/kernels/gpu_kernel_tests" --verbose --only gdn_prefill,gdn
      run_stage gdn_prefill_memcheck 600 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$bundle/kernels/gpu_kernel_tests" --quick --only gdn_prefill
      for form in chunked recurrent; do
        run_stage "prefill_35b_gdn_$form" 600 "$cli" bench prefill --preset qwen3.6-35b-a3b --weights q4_0 --device cuda \
          --prompt 512,4096,32768 --steps 1 --warmup 1 --gdn-prefill "$form"
      done ;;
    *) echo "unknown stage $stage" ;;
  esac
done
