// GpuBackend: construction (shape checks, weight upload, buffer sizing), slot state moves,
// memory statistics. The forward passes are in gpu_forward.cpp.
#include "runtime/gpu/gpu_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/attention/attention_gpu.h"
#include "kernels/float16.h"
#include "kernels/sampling/sampling_gpu.h"
#include "kernels/gdn/gdn_gpu.h"
#include "kernels/matmul/matmul_experts_prefill_gpu.h"
#include "kernels/matmul/matmul_gpu.h"

namespace deltaserve::runtime {
namespace {

// The tiled prefill products: the exact bf16 tensor-core form for Q4_0 where the device has
// bf16 mma (its bits are as close to the f32 reference as the f32 tiles', and several times
// faster), else f32.
kernels::MatmulMath default_prefill_math() {
  return kernels::tensor_exact_available() ? kernels::MatmulMath::kTensorExact : kernels::MatmulMath::kF32;
}

const char* prefill_math_name(kernels::MatmulMath m) {
  return m == kernels::MatmulMath::kTf32 ? "tf32" : m == kernels::MatmulMath::kTensorExact ? "exact-tensor (Q4_0)" : "f32";
}

[[noreturn]] void unsupported(const std::string& what) {
  throw std::runtime_error("GPU backend: model shape not supported by the GPU kernels: " + what);
}

// Two-phase carving of one arena: reserve pieces, then resolve them to pointers.
class Carver {
 public:
  explicit Carver(gpu::DeviceArena& arena) : arena_(arena) {}
  template <class T>
  void add(T*& target, int64_t count) {
    pieces_.push_back({reinterpret_cast<void**>(&target), arena_.reserve(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T))});
  }
  void add_bytes(void*& target, size_t bytes) { pieces_.push_back({&target, arena_.reserve(std::max<size_t>(bytes, 1))}); }
  void allocate() {
    arena_.allocate();
    for (const Piece& p : pieces_) *p.target = arena_.at<void>(p.offset);
  }

 private:
  struct Piece {
    void** target;
    size_t offset;
  };
  gpu::DeviceArena& arena_;
  std::vector<Piece> pieces_;
};

}  // namespace

GpuBackend::GpuBackend(const LoadedModel& model, const CacheConfig& cache, int device_index)
    : model_(model), config_(model.config), cache_(cache), device_(device_index) {
  if (cache_.num_state_slots <= 0 || cache_.kv_block_tokens <= 0 || cache_.num_kv_blocks <= 0 ||
      cache_.max_verify_rows <= 0 || cache_.max_step_rows < 0 || cache_.max_capture_layers < 0 ||
      cache_.max_capture_layers > config_.num_layers)
    throw std::invalid_argument("cache config: slots, block tokens, blocks and verify rows must be positive, captured layers "
                                "at most the trunk's");
  check_model();
  int count = 0;
  if (gpuGetDeviceCount(&count) != gpuSuccess || count <= 0) {
    (void)gpuGetLastError();
    throw std::runtime_error("GPU backend: no GPU device is visible to this process");
  }
  if (device_ < 0 || device_ >= count)
    throw std::runtime_error("GPU backend: device " + std::to_string(device_) + " does not exist (" + std::to_string(count) +
                             " visible)");
  DS_GPU_CHECK(gpuSetDevice(device_), "device %d", device_);
  DS_GPU_CHECK(gpuStreamCreate(&stream_), "stream on device %d", device_);
  timeline_ = std::make_unique<gpu::StepTimeline>(cache_.gpu_tuning.timeline);
  weights_ = std::make_unique<gpu::GpuWeights>(config_, model_.weights, [this](const std::string& line) {
    std::fprintf(stderr, "deltaserve: %s backend, device %d: %s\n", name().c_str(), device_, line.c_str());
  });
  prefill_math_ = default_prefill_math();
#if defined(DS_GPU_HIP)
  if (cache_.gdn_prefill == GdnPrefill::kChunked)
    throw std::runtime_error("GPU backend: GDN prefill 'chunked' needs the CUDA kernel (gdn_prefill_gpu); HIP runs "
                             "'recurrent' (use 'auto' or 'recurrent')");
#endif
  const bool has_tensor = kernels::tensor_matvec_available();
  if ((cache_.decode_matvec == DecodeMatvec::kTensor || cache_.decode_matvec == DecodeMatvec::kStaged) && !has_tensor)
    throw std::runtime_error(std::string("GPU backend: decode matvec '") + decode_matvec_name(cache_.decode_matvec) +
                             "' needs bf16 tensor cores (CUDA sm_80 or newer); device " + std::to_string(device_) +
                             " has none (use 'fma' or 'auto')");
  // Auto (where the device has bf16 mma): tensor for servers of kTensorMatvecMinSlots+ slots,
  // staged below (backend.h).
  const bool auto_mma = cache_.decode_matvec == DecodeMatvec::kAuto && has_tensor;
  const bool tensor = cache_.decode_matvec == DecodeMatvec::kTensor ||
                      (auto_mma && cache_.num_state_slots >= kTensorMatvecMinSlots);
  const bool staged = cache_.decode_matvec == DecodeMatvec::kStaged || (auto_mma && !tensor);
  matvec_math_ = tensor ? kernels::MatvecMath::kTensorCores : staged ? kernels::MatvecMath::kStaged : kernels::MatvecMath::kCudaCores;
  // With the tensor matvec the routed experts of decode and verify rows run on the exact
  // tensor-core tile (grouped by expert) too: many streams' expert pairs share their weights'
  // loads there, which the matvec cannot (bench/RESULTS.md).
  const GpuParityForms& forms = cache_.gpu_tuning.forms;
  tiled_decode_experts_ = tensor;  // tensor: bf16 mma is there
  // So do their plain Q4_0 products with very wide matrices (the LM head): there the exact
  // tile beats the tensor-core matvec; the others stay on the matvec (gpu::kTiledDecodeMinOutputs).
  const int64_t min_outputs = forms.tiled_decode_min_outputs >= 0 ? forms.tiled_decode_min_outputs : gpu::kTiledDecodeMinOutputs;
  tiled_decode_min_outputs_ = tensor ? min_outputs : 0;
  // Under the staged matvec the MoE decode rows' down products and combine run as one launch
  // (moe_down_combine_gpu: one fewer launch and about two fewer round trips per layer) at
  // gpu::kFusedDownCombineRows; same bits as the two launches.
  fuse_down_combine_rows_ = !staged || !forms.fuse_down_combine ? std::pair<int64_t, int64_t>{1, 0} : gpu::kFusedDownCombineRows;
  // Under the staged matvec short decode steps' products carry their input norms (the MoE
  // combine's serial norm epilogue gone; products_normalise_input); same bits.
  carry_input_norms_ = staged && forms.carry_input_norms;
  // Under the staged matvec a dense model's norms between its products are deferred into them
  // (gpu::norm_deferred: a dense model's one-block norm launches gone; bits of their own).
  defer_norms_ = staged && forms.defer_norms;
  size_buffers();
  const size_t slots = static_cast<size_t>(cache_.num_state_slots);
  live_entry_.resize(slots);
  for (size_t s = 0; s < slots; ++s) live_entry_[s] = static_cast<int32_t>(static_cast<int64_t>(s) * entries_per_slot_);
  ring_first_.assign(slots, -1);
  verify_rows_.assign(slots, 0);
}

GpuBackend::~GpuBackend() {
  if (stream_ != nullptr) {
    (void)gpuSetDevice(device_);
    (void)gpuStreamSynchronize(stream_);
    (void)gpuStreamDestroy(stream_);
  }
}

std::string GpuBackend::name() const {
#if defined(DS_GPU_HIP)
  return "hip";
#else
  return "cuda";
#endif
}

std::string GpuBackend::device_name() const {
  gpuDeviceProp prop{};
  if (gpuGetDeviceProperties(&prop, device_) != gpuSuccess) {
    (void)gpuGetLastError();
    return name() + ":" + std::to_string(device_);
  }
  return name() + ": " + prop.name;
}

// ", MoE down + combine fused at A-B rows" (B "any" past every count) or ", ... apart"; empty
// off the staged matvec, where the fused launch does not exist.
std::string GpuBackend::fuse_down_combine_setting() const {
  const auto [first, last] = fuse_down_combine_rows_;
  if (last < first) return matvec_math_ == kernels::MatvecMath::kStaged ? ", MoE down + combine apart" : "";
  const std::string upto = last == std::numeric_limits<int64_t>::max() ? "any" : std::to_string(last);
  return ", MoE down + combine fused at " + std::to_string(first) + "-" + upto + " rows";
}

std::string GpuBackend::speed_settings() const {
  const auto on = [](bool b) { return b ? "on" : "off"; };
  return std::string("step graphs ") + on(graphs_enabled()) + ", dependent launches " +
         on(kernels::gpu::dependent_launch_enabled()) + ", deferred norms " + on(defer_norms_) +
         ", input norms in the products " + on(carry_input_norms_) +
         (carry_input_norms_ ? " (1-" + std::to_string(gpu::kCarriedInputNormMaxRows) + " decode rows, width <= " +
                                     std::to_string(gpu::kCarriedInputNormMaxWidth) + ")"
                             : std::string()) +
         ", expert pair groups " +
         (matvec_math_ == kernels::MatvecMath::kStaged ? std::string("off (staged matvec)") : gpu::expert_grouping_setting()) +
         fuse_down_combine_setting() + ", attention head split up to " + std::to_string(kernels::kAttentionSplitMaxBlocks) +
         " blocks, attention V loads after the scores from " + std::to_string(kernels::kAttentionLateValueUnits) +
         " rows x KV heads, GDN state " + kernels::gdn_step_state_home_setting() + ", prefill matmul " +
         prefill_math_name(prefill_math_) + ", Q4_0 matvec " +
         (matvec_math_ == kernels::MatvecMath::kTensorCores ? "tensor"
          : matvec_math_ == kernels::MatvecMath::kStaged    ? "staged"
                                                             : "fma") +
         (tiled_decode_experts_ ? ", decode experts tiled" : "") + (tiled_decode_min_outputs_ > 0
              ? ", decode products of " + std::to_string(tiled_decode_min_outputs_) + "+ outputs tiled"
              : std::string());
}

// The preconditions of the kernels, as clear load-time errors instead of launch failures.
void GpuBackend::check_model() const {
  const ModelConfig& c = config_;
  if (c.num_embd % 8 != 0) unsupported("hidden size " + std::to_string(c.num_embd) + " is not a multiple of 8");
  if (c.num_gdn_layers() > 0) {
    if (c.ssm_head_dim != 64 && c.ssm_head_dim != 128)
      unsupported("Gated DeltaNet head dim " + std::to_string(c.ssm_head_dim) + " (gdn_step_gpu takes 64 or 128)");
    if (c.conv_kernel != 4) unsupported("conv kernel " + std::to_string(c.conv_kernel) + " (gdn_step_gpu takes 4)");
    if (c.ssm_k_heads <= 0 || c.ssm_v_heads % c.ssm_k_heads != 0) unsupported("GDN value heads not a multiple of key heads");
  }
  if (c.num_attention_layers() > 0 || c.num_mtp_layers > 0) {
    if (c.head_dim % 4 != 0 || c.head_dim > 256) unsupported("attention head dim " + std::to_string(c.head_dim));
    if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.num_heads / c.num_kv_heads > 16)
      unsupported("attention heads " + std::to_string(c.num_heads) + " / KV heads " + std::to_string(c.num_kv_heads));
    if (c.rope_dims <= 0 || c.rope_dims % 2 != 0) unsupported("RoPE dims " + std::to_string(c.rope_dims));
  }
  if (c.is_moe() && (c.num_experts_used < 1 || c.num_experts_used > std::min<int64_t>(c.num_experts, 32) ||
                     c.num_experts > 4096))
    unsupported("MoE top-" + std::to_string(c.num_experts_used) + " of " + std::to_string(c.num_experts) + " experts");
}

void GpuBackend::size_buffers() {
  const ModelConfig& c = config_;
  const int64_t S = cache_.num_state_slots, Rv = cache_.max_verify_rows, H = c.num_embd, V = c.num_vocab;
  max_rows_ = cache_.max_step_rows > 0 ? cache_.max_step_rows : S * Rv + kDefaultPrefillRows;
  max_logit_rows_ = std::min<int64_t>(max_rows_, std::max<int64_t>(S * Rv, kLogitBudgetBytes / (V * 4)));
  max_context_ = static_cast<int64_t>(cache_.num_kv_blocks) * cache_.kv_block_tokens;
  entries_per_slot_ = Rv >= 2 ? 2 * Rv : 1;
  delta_entry_elems_ = c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim;
  const kernels::StateType delta_type =
      cache_.state_precision == StatePrecision::kBf16 ? kernels::StateType::kBf16 : kernels::StateType::kF32;
  delta_elem_bytes_ = static_cast<size_t>(kernels::state_type_bytes(delta_type));
  conv_entry_floats_ = (c.conv_kernel - 1) * c.conv_channels();

  // Caches and states.
  Carver kv(kv_arena_), state(state_arena_);
  const int64_t kv_floats = max_context_ * c.num_kv_heads * c.head_dim;
  const int64_t entries = S * entries_per_slot_;
  kv_.resize(static_cast<size_t>(c.num_attention_layers()));
  gdn_.resize(static_cast<size_t>(c.num_gdn_layers()));
  for (int64_t i = 0, a = 0, g = 0; i < c.num_layers; ++i) {
    if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::GatedDeltaNet) {
      layer_cache_index_.push_back(static_cast<int>(g));
      gdn_[static_cast<size_t>(g)].delta_type = delta_type;
      state.add_bytes(gdn_[static_cast<size_t>(g)].delta, static_cast<size_t>(entries * delta_entry_elems_) * delta_elem_bytes_);
      state.add(gdn_[static_cast<size_t>(g++)].conv, entries * conv_entry_floats_);
    } else {
      layer_cache_index_.push_back(static_cast<int>(a));
      kv.add(kv_[static_cast<size_t>(a)].k, kv_floats);
      kv.add(kv_[static_cast<size_t>(a++)].v, kv_floats);
    }
  }
  if (weights_->has_mtp) {
    kv.add(mtp_kv_.k, kv_floats);
    kv.add(mtp_kv_.v, kv_floats);
  }

  // Workspace for max_rows_ rows.
  const int64_t R = max_rows_, k = c.is_moe() ? c.num_experts_used : 0;
  Carver w(work_arena_);
  ws_.max_rows = R;
  w.add(ws_.x, R * H);
  w.add(ws_.a, R * H);
  w.add(ws_.y, R * H);
  if (c.num_attention_layers() > 0 || weights_->has_mtp) {
    w.add(ws_.qg, R * 2 * c.num_heads * c.head_dim);
    w.add(ws_.k, R * c.num_kv_heads * c.head_dim);
    w.add(ws_.v, R * c.num_kv_heads * c.head_dim);
    w.add(ws_.att_o, R * c.num_heads * c.head_dim);
    kernels::PagedAttentionGpuArgs probe{};
    probe.num_rows = 1;
    probe.num_heads = c.num_heads;
    probe.head_dim = c.head_dim;
    probe.max_keys = max_context_;
    const int64_t per_row = kernels::paged_attention_workspace_floats(probe);
    const int64_t rows_fit = std::max<int64_t>(1, (kLogitBudgetBytes / 4) / per_row);
    ws_.att_scratch_floats = std::min(R, rows_fit) * per_row;
    w.add(ws_.att_scratch, ws_.att_scratch_floats);
    w.add(ws_.att_sync, R * c.num_heads);  // zero-filled by allocate(); every launch leaves it zero
  }
  if (c.num_gdn_layers() > 0) {
    w.add(ws_.qkv, R * c.conv_channels());
    w.add(ws_.z, R * c.ssm_value_dim());
    w.add(ws_.beta, R * c.ssm_v_heads);
    w.add(ws_.alpha, R * c.ssm_v_heads);
    w.add(ws_.gdn_o, R * c.ssm_value_dim());
    w.add(ws_.gdn_sync, S * c.ssm_k_heads);  // zero-filled by allocate(); every launch leaves it zero
#if !defined(DS_GPU_HIP)  // gdn_prefill_gpu is CUDA-only for now (gdn_gpu.h)
    // No chunked workspace: every prefill row runs through the step kernel (GdnPrefill::kRecurrent).
    if (cache_.gdn_prefill != GdnPrefill::kRecurrent) {
      kernels::GdnPrefillArgs probe{};
      probe.num_rows = R;
      probe.num_seqs = S;
      probe.num_k_heads = c.ssm_k_heads;
      probe.num_v_heads = c.ssm_v_heads;
      probe.head_dim_k = c.ssm_head_dim;
      probe.head_dim_v = c.ssm_head_dim;
      w.add(ws_.gdn_prefill_ws, kernels::gdn_prefill_workspace_floats(probe) + 4);
    }
#endif
  }
  w.add(ws_.norm_sync, R);  // matmul_norm_gpu counters: zero-filled by allocate(), left zero by every launch
  ws_.norm_squares_stride = ((H + 15) / 16 + 3) / 4 * 4;  // a deferred norm's tile sums, rows 16-byte aligned
  w.add(ws_.norm_squares, R * ws_.norm_squares_stride);
  if (c.is_moe()) {
    w.add(ws_.router_logits, R * c.num_experts);
    w.add(ws_.router_sync, R);  // zero-filled by allocate(); every launch leaves it zero
    w.add(ws_.expert_prefill_ws, static_cast<int64_t>(kernels::matmul_experts_prefill_workspace_bytes(R * k, c.num_experts)));
    w.add(ws_.expert_ids, R * k);
    w.add(ws_.expert_weights, R * k);
    w.add(ws_.pair_group_expert, R * k);
    w.add(ws_.pair_group_pairs, R * k * 4);
    w.add(ws_.pair_group_count, 1);
    w.add(ws_.exp_g, R * k * c.expert_ffn_dim);
    w.add(ws_.exp_u, R * k * c.expert_ffn_dim);
    w.add(ws_.exp_out, R * k * H);
    w.add(ws_.sh_g, R * c.shared_ffn_dim);
    w.add(ws_.sh_u, R * c.shared_ffn_dim);
    w.add(ws_.sh_gate, R);
    w.add(ws_.sh_out, R * H);
  } else {
    w.add(ws_.ffn_g, R * c.ffn_dim);
    w.add(ws_.ffn_u, R * c.ffn_dim);
  }
  if (weights_->has_mtp) w.add(ws_.mtp_cat, R * 2 * H);
  w.add(ws_.lm_in, max_logit_rows_ * H);
  if (matvec_math_ == kernels::MatvecMath::kTensorCores) {
    // The tensor-core matvec's pre-split activations (kernels::MatvecContext::split_scratch): two
    // matrices of every decode and verify row at the widest input of any product; a launch
    // that does not fit (prefill-sized rows) splits as it goes.
    const int64_t widest = std::max({2 * H, c.num_heads * c.head_dim, c.ssm_value_dim(), c.ffn_dim, c.shared_ffn_dim,
                                     c.expert_ffn_dim});
    matvec_split_bytes_ = 2 * kernels::matvec_split_scratch_bytes(std::min(R, S * std::max<int64_t>(1, Rv)), widest);
    w.add_bytes(matvec_split_scratch_, matvec_split_bytes_);
  }

  // Staging: 12 int32 arrays (+16 bytes of alignment each), the MTP hidden inputs and the draws
  // (a logit row index and kernels::DrawParams each, two arrays).
  const int64_t draw_ints = max_logit_rows_ * (1 + static_cast<int64_t>(sizeof(kernels::DrawParams) / 4)) + 2 * 4;
  const int64_t ints = 4 * R + 3 * S + (S + 1) + S * cache_.num_kv_blocks + 2 * R + 2 * S + 1 + 12 * 4 + draw_ints;
  const size_t input_bytes = static_cast<size_t>(ints) * 4 + static_cast<size_t>(R * H) * 4 + 16;
  // Output: hidden rows, argmax ids, drawn ids, captured layers of the hidden rows, logit rows
  // (gpu_forward.cpp's output_offsets).
  const int64_t captured = R * cache_.max_capture_layers * H;
  output_floats_ = static_cast<size_t>(R * H + 4 + max_logit_rows_ + 4 + max_logit_rows_ + 4 + captured + 4 + max_logit_rows_ * V);
  w.add(argmax_ws_, kernels::argmax_workspace_words(max_logit_rows_, V));  // zero-filled by allocate()
  w.add(staging_device_, static_cast<int64_t>(input_bytes));
  w.add(output_device_, static_cast<int64_t>(output_floats_));

  kv.allocate();
  state.allocate();
  w.allocate();
  pinned_ = std::make_unique<gpu::PinnedArena>(input_bytes, output_floats_ * sizeof(float));
  staging_ = std::make_unique<gpu::StagingLayout>(pinned_->input(), pinned_->input_bytes());
}

void GpuBackend::reset_slot(int32_t slot) {
  const int32_t entry = static_cast<int32_t>(slot * entries_per_slot_);
  live_entry_[static_cast<size_t>(slot)] = entry;
  const size_t delta_bytes = static_cast<size_t>(delta_entry_elems_) * delta_elem_bytes_;  // zero bits: 0.0 in f32 and bf16
  const size_t conv_bytes = static_cast<size_t>(conv_entry_floats_) * sizeof(float);
  for (const gpu::GdnStatePools& p : gdn_) {
    DS_GPU_CHECK(gpuMemsetAsync(static_cast<unsigned char*>(p.delta) + entry * delta_bytes, 0, delta_bytes, stream_),
                 "reset slot %d", slot);
    DS_GPU_CHECK(gpuMemsetAsync(p.conv + entry * conv_entry_floats_, 0, conv_bytes, stream_), "reset slot %d", slot);
  }
}

void GpuBackend::rollback(int32_t slot, int32_t num_rows_kept) {
  if (slot < 0 || slot >= cache_.num_state_slots) throw std::invalid_argument("rollback: slot out of range");
  const size_t s = static_cast<size_t>(slot);
  const int32_t rows = verify_rows_[s];
  if (num_rows_kept < 1 || num_rows_kept > rows)
    throw std::invalid_argument("rollback: slot " + std::to_string(slot) + " kept " + std::to_string(num_rows_kept) +
                                " rows of a verify step of " + std::to_string(rows));
  verify_rows_[s] = 0;
  live_entry_[s] = ring_first_[s] + num_rows_kept - 1;  // an index move: the entry already holds that state
}

BackendMemoryStats GpuBackend::memory_stats() const {
  BackendMemoryStats m;
  m.device_bytes_used = static_cast<int64_t>(weights_->bytes() + kv_arena_.bytes() + state_arena_.bytes() + work_arena_.bytes());
  size_t free_bytes = 0, total_bytes = 0;
  (void)gpuSetDevice(device_);
  if (gpuMemGetInfo(&free_bytes, &total_bytes) == gpuSuccess) m.device_bytes_total = static_cast<int64_t>(total_bytes);
  m.pinned_bytes = pinned_->bytes();
  m.pinned_registrations = pinned_->registrations();
  m.device_bytes_used += static_cast<int64_t>(checkpoint_arena_.bytes());
  if (checkpoint_host_) {
    m.pinned_bytes += checkpoint_host_->bytes();
    m.pinned_registrations += checkpoint_host_->registrations();
  }
  return m;
}

std::vector<float> GpuBackend::read_delta_state(int gdn_layer, int32_t slot) const {
  const size_t n = static_cast<size_t>(delta_entry_elems_), bytes = n * delta_elem_bytes_;
  const unsigned char* src = static_cast<const unsigned char*>(gdn_.at(static_cast<size_t>(gdn_layer)).delta) +
                             static_cast<size_t>(state_entry(slot)) * bytes;
  DS_GPU_CHECK(gpuStreamSynchronize(stream_), "read state");
  std::vector<float> host(n);
  if (delta_elem_bytes_ == sizeof(float)) {
    DS_GPU_CHECK(gpuMemcpy(host.data(), src, bytes, gpuMemcpyDeviceToHost), "read delta state");
    return host;
  }
  std::vector<uint16_t> bits(n);  // bf16, widened exactly
  DS_GPU_CHECK(gpuMemcpy(bits.data(), src, bytes, gpuMemcpyDeviceToHost), "read delta state");
  for (size_t i = 0; i < n; ++i) host[i] = kernels::bf16_to_fp32(bits[i]);
  return host;
}

std::vector<float> GpuBackend::read_conv_state(int gdn_layer, int32_t slot) const {
  std::vector<float> host(static_cast<size_t>(conv_entry_floats_));
  const float* src = gdn_.at(static_cast<size_t>(gdn_layer)).conv + state_entry(slot) * conv_entry_floats_;
  DS_GPU_CHECK(gpuStreamSynchronize(stream_), "read state");
  DS_GPU_CHECK(gpuMemcpy(host.data(), src, host.size() * sizeof(float), gpuMemcpyDeviceToHost), "read conv state");
  return host;
}

}  // namespace deltaserve::runtime
