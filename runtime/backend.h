// The interface every backend (CPU, GPU) implements. Owned and called by one engine thread;
// no method is thread-safe. A backend owns the weights on its device, the recurrent-state
// slots and the paged KV cache; the scheduler decides which slots and blocks each sequence
// uses and passes them in the plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <span>

#include "runtime/activation_link.h"
#include "runtime/batch_plan.h"
#include "runtime/cache_ops.h"
#include "runtime/gpu_tuning.h"
#include "runtime/model_config.h"

namespace deltaserve::runtime {

// Element type of the recurrent (delta) states, GDN layers' [Hv][dk][dv] per sequence. bf16
// halves the state's memory and traffic (at 64 streams the 35B-A3B reads and writes about
// 126 MB of f32 state per stream and step); the arithmetic stays f32 and the state is rounded
// to bf16 after every token. GPU backend only; conv states stay f32.
enum class StatePrecision : int32_t { kF32, kBf16 };

inline const char* state_precision_name(StatePrecision p) { return p == StatePrecision::kBf16 ? "bf16" : "f32"; }
// "f32" / "bf16"; nullopt for anything else.
inline std::optional<StatePrecision> parse_state_precision(std::string_view text) {
  if (text == "f32") return StatePrecision::kF32;
  if (text == "bf16") return StatePrecision::kBf16;
  return std::nullopt;
}

// How a GPU backend multiplies Q4_0 weights in decode and verify steps (kernels/matmul/matmul_gpu.h
// MatvecMath): kFma, f32 fused multiply-adds on the vector units (fastest for a few streams);
// kTensor, exact products on the tensor cores with f32 sums, the dense matrices by the tensor-core
// matvec, the routed experts by the expert-grouped exact tile and the LM head by the exact tile
// (CUDA sm_80 and up; about twice kFma's throughput at 64 streams, half its tokens/s at one
// stream; bench/RESULTS.md). Both are batch-invariant, but they differ from each other in the last bits, so a backend keeps one
// for its lifetime. kStaged: for a few streams, the products (dense matrices, expert pairs,
// the LM head) staged through shared memory onto the tensor cores, exact products with the
// activation's parts in the mma's columns (matmul_mma_staged.cu), shapes it does not take as
// kFma (CUDA sm_80 and up; faster than kFma for 1-16 streams); its own last bits again. kAuto, where the device has bf16 mma: kTensor
// for a backend of 32 or more state slots (a server sized for throughput), else kStaged;
// elsewhere kFma. The CPU backend runs f32 either way and refuses kTensor and kStaged.
enum class DecodeMatvec : int32_t { kAuto, kFma, kTensor, kStaged };

inline const char* decode_matvec_name(DecodeMatvec m) {
  return m == DecodeMatvec::kFma ? "fma" : m == DecodeMatvec::kTensor ? "tensor" : m == DecodeMatvec::kStaged ? "staged" : "auto";
}
// "auto" / "fma" / "tensor" / "staged"; nullopt for anything else.
inline std::optional<DecodeMatvec> parse_decode_matvec(std::string_view text) {
  if (text == "auto") return DecodeMatvec::kAuto;
  if (text == "fma") return DecodeMatvec::kFma;
  if (text == "tensor") return DecodeMatvec::kTensor;
  if (text == "staged") return DecodeMatvec::kStaged;
  return std::nullopt;
}
inline constexpr int32_t kTensorMatvecMinSlots = 32;  // DecodeMatvec::kAuto's threshold

// How a backend runs the gated delta rule over prefill rows (MODEL.md 3; decode and verify rows
// are always recurrent). kRecurrent: token by token, the decode kernels' form, whose bits do not
// depend on where a prompt is cut (prefix-cache resume points, scheduler chunk sizes).
// kChunked: the chunked WY form, chunks of 64 rows at multiples of 64 positions from the
// sequence start; the same values to f32 rounding, not the same bits, and bits that depend on
// a cut only where it falls off a multiple of 64 (docs/prefix-cache.md, "Exactness").
// kAuto: the GPU backend chunks the prefill rows where it has the chunked kernel (CUDA; HIP
// stays recurrent); the CPU backend stays recurrent (bench/RESULTS.md, "CPU chunked GDN").
enum class GdnPrefill : int32_t { kAuto, kRecurrent, kChunked };

inline const char* gdn_prefill_name(GdnPrefill m) {
  return m == GdnPrefill::kRecurrent ? "recurrent" : m == GdnPrefill::kChunked ? "chunked" : "auto";
}
// "auto" / "recurrent" / "chunked"; nullopt for anything else.
inline std::optional<GdnPrefill> parse_gdn_prefill(std::string_view text) {
  if (text == "auto") return GdnPrefill::kAuto;
  if (text == "recurrent") return GdnPrefill::kRecurrent;
  if (text == "chunked") return GdnPrefill::kChunked;
  return std::nullopt;
}

struct CacheConfig {
  int32_t num_state_slots = 16;   // sequences that can be live at once
  int32_t kv_block_tokens = 16;   // tokens per KV block
  int32_t num_kv_blocks = 1024;   // blocks in the pool (shared by all sequences)
  int32_t max_verify_rows = 1;    // rows of one sequence whose states a verify step keeps
  int32_t max_step_rows = 0;      // rows one forward may carry (GPU workspaces are sized for it);
                                  // 0: the backend derives a bound (the CPU backend needs none)
  StatePrecision state_precision = StatePrecision::kF32;
  DecodeMatvec decode_matvec = DecodeMatvec::kAuto;
  GdnPrefill gdn_prefill = GdnPrefill::kAuto;
  GpuTuning gpu_tuning{};  // GPU backend only (runtime/gpu_tuning.h)
  // Trunk layers one forward may capture (BatchPlan::capture_layers: the DFlash drafter's
  // target layers). The GPU backend sizes its capture buffers for this many at start and
  // refuses plans with more; the CPU backend needs no bound. 0: no capture.
  int32_t max_capture_layers = 0;
};

// Memory a backend holds, for metrics and leak checks. Flat across requests once loaded:
// every buffer is sized at start from the CacheConfig.
struct BackendMemoryStats {
  int64_t device_bytes_used = 0;       // device memory held: weights, caches, workspaces
  int64_t device_bytes_total = 0;      // the device's capacity (0 on the CPU)
  int64_t pinned_bytes = 0;            // page-locked host memory held
  int64_t pinned_registrations = 0;    // live page-locked allocations or registrations
  // The CPU backend's share of host memory: the weights of its layer range (mapped, read),
  // its KV pools, recurrent states, checkpoints and activations (a layer split's per-device
  // memory on CPU devices; 0 on a GPU backend).
  int64_t host_bytes_held = 0;
};

// One device of a layer split (runtime/layer_split_backend.h), for metrics and logs.
struct SplitDeviceStats {
  DeviceId device;
  LayerRange layers;           // trunk layers it holds
  int64_t bytes_used = 0;      // its weights, caches, checkpoints and workspaces
  int64_t bytes_total = 0;     // the device's capacity (0 on the CPU)
  LinkStats inbound;           // the hop from the previous device (zeros on the first)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The device itself, for keys of measured tables (runtime/step_cost_table.h): the backend's
  // name and, on a GPU, the device's model ("cuda: NVIDIA H200").
  virtual std::string device_name() const { return name(); }
  // The settings that change speed but never values (e.g. "step graphs on, ..."), one line
  // for benchmark logs, so a figure says how it was measured. Empty where there are none.
  virtual std::string speed_settings() const { return {}; }
  virtual const ModelConfig& config() const = 0;
  virtual const CacheConfig& cache_config() const = 0;

  // Runs every row of the plan through the trunk; fills logits (and hidden states) for the
  // rows that asked. Sequences are independent: a row's result does not depend on the
  // other sequences of the plan.
  virtual void forward(const BatchPlan& plan, ForwardOutput& out) = 0;

  // Runs the MTP head over the plan's rows (its own KV cache, same block ids as the trunk).
  // Throws std::logic_error when the model has no MTP head.
  virtual void forward_mtp(const MtpPlan& plan, ForwardOutput& out) = 0;

  // After a verify step (keep_row_states) of a slot: keep only its first num_rows_kept rows,
  // i.e. make the slot's recurrent state the one after row num_rows_kept - 1. KV entries of
  // the dropped rows need nothing: the next step overwrites those positions.
  virtual void rollback(int32_t slot, int32_t num_rows_kept) = 0;

  virtual BackendMemoryStats memory_stats() const { return {}; }
  // Prompt chunks should end on multiples of this many positions and leave at least this
  // many rows when they do not finish the prompt: then a backend whose prefill kernels round
  // by fixed position blocks gives the same bits however the scheduler cut the prompt. 1: any
  // cut is fine (the CPU backend is bitwise independent of chunking).
  virtual int32_t prefill_chunk_align() const { return 1; }

  // Prefix-cache checkpoints (docs/prefix-cache.md, runtime/cache_ops.h). Bytes of one
  // checkpoint: the recurrent state of one slot (every GDN layer's delta + conv state); 0 when
  // the backend keeps no checkpoints (the scheduler's cache is then off).
  virtual int64_t checkpoint_bytes() const { return 0; }
  // Makes room for num_device checkpoints next to the state slots and num_host in page-locked
  // host memory. Called once, before the first forward; throws std::invalid_argument for
  // negative counts and std::logic_error when called twice or unsupported.
  virtual void reserve_checkpoints(int32_t num_device, int32_t num_host);
  // Applies the operations in order, before the next forward (on a device backend: copies
  // enqueued on the step's stream, no host synchronisation). Throws std::invalid_argument for
  // an out-of-range slot, block or checkpoint (before any copy).
  virtual void apply_cache_ops(std::span<const CacheOp> ops);

  // Device kernels launched since construction (graph replays count their kernel nodes), for
  // benchmarks; -1 when the backend does not count them.
  virtual int64_t kernel_launches() const { return -1; }

  // Layer split (runtime/layer_split_backend.h). A backend built for a layer range (a
  // "stage") holds only those layers' weights, recurrent states and KV pools; forward() then
  // runs the rows through its range only: the first stage embeds the tokens, a later one starts
  // from the activations written into stage_input(); a stage that is not last leaves its output
  // in stage_output() and fills nothing of `out`; the last stage applies the final norm and
  // LM head and holds the MTP head. The slot bookkeeping (resets, verify rows, rollback,
  // checkpoints of its own GDN layers, its own KV blocks) is per stage, driven by the same plan.
  // A backend of every layer is its own single stage.
  virtual LayerRange layer_range() const { return {0, static_cast<int32_t>(config().num_layers)}; }
  // The buffer, on this backend's device, that the next forward() of a stage that does not
  // start at layer 0 reads: [num_rows][H] f32. Throws std::logic_error where unsupported.
  virtual ActivationBuffer stage_input(int64_t num_rows);
  // The activations the last forward() left after this stage's last layer ([rows][H] f32).
  virtual ActivationBuffer stage_output();
  // Per device of a layer split, in order; empty for a backend on one device.
  virtual std::vector<SplitDeviceStats> split_stats() const { return {}; }
};

}  // namespace deltaserve::runtime
