#include "runtime/cpu/cpu_backend.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/embedding/embedding.h"
#include "kernels/norm/norm.h"
#include "kernels/sampling/draw_ref.h"
#include "runtime/greedy.h"
#include "runtime/plan_checks.h"

namespace deltaserve::runtime {
namespace {

void add_rows(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace

CpuBackend::CpuBackend(const LoadedModel& model, const CacheConfig& cache, int num_threads)
    : CpuBackend(model, cache, num_threads, {0, static_cast<int32_t>(model.config.num_layers)}, DeviceId{}) {}

CpuBackend::CpuBackend(const LoadedModel& model, const CacheConfig& cache, int num_threads, LayerRange layers,
                       DeviceId device)
    : model_(model), config_(model.config), weights_(model.weights), cache_(cache), pool_(num_threads),
      layers_(layers), device_(device) {
  if (layers_.first < 0 || layers_.end > config_.num_layers || layers_.size() < 1)
    throw std::invalid_argument("layer range " + std::to_string(layers_.first) + "-" + std::to_string(layers_.end - 1) +
                                " is not a non-empty range of the model's " + std::to_string(config_.num_layers) + " layers");
  if (device_.kind != DeviceKind::kCpu) throw std::invalid_argument("the CPU backend runs on CPU devices only");
  if (cache_.num_state_slots <= 0 || cache_.kv_block_tokens <= 0 || cache_.num_kv_blocks <= 0 ||
      cache_.max_verify_rows <= 0)
    throw std::invalid_argument("cache config: slots, block tokens, blocks and verify rows must be positive");
  if (cache_.state_precision != StatePrecision::kF32)
    throw std::invalid_argument(std::string("recurrent-state precision ") + state_precision_name(cache_.state_precision) +
                                " is supported by the GPU backend only (the CPU backend keeps f32 states)");
  if (cache_.decode_matvec == DecodeMatvec::kTensor || cache_.decode_matvec == DecodeMatvec::kStaged)
    throw std::invalid_argument(std::string("decode matvec '") + decode_matvec_name(cache_.decode_matvec) +
                                "' is supported by the GPU backend only (the CPU backend multiplies in f32)");
  verify_rows_.assign(static_cast<size_t>(cache_.num_state_slots), 0);
  const ModelConfig& c = config_;
  const size_t slots = static_cast<size_t>(cache_.num_state_slots);
  entries_per_slot_ = cache_.max_verify_rows >= 2 ? 2 * cache_.max_verify_rows : 1;
  const size_t entries = slots * static_cast<size_t>(entries_per_slot_);
  live_entry_.resize(slots);
  for (size_t s = 0; s < slots; ++s) live_entry_[s] = static_cast<int32_t>(s * static_cast<size_t>(entries_per_slot_));
  ring_first_.assign(slots, -1);
  const size_t kv_floats = static_cast<size_t>(cache_.num_kv_blocks) * static_cast<size_t>(cache_.kv_block_tokens) *
                           static_cast<size_t>(c.num_kv_heads * c.head_dim);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (i < layers_.first || i >= layers_.end) {
      layer_cache_index_.push_back(-1);  // another stage's layer
    } else if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::GatedDeltaNet) {
      layer_cache_index_.push_back(static_cast<int>(gdn_state_.size()));
      cpu::GdnStateLayer& s = gdn_state_.emplace_back();
      s.conv.assign(entries * static_cast<size_t>((c.conv_kernel - 1) * c.conv_channels()), 0.0f);
      s.delta.assign(entries * static_cast<size_t>(c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim), 0.0f);
    } else {
      layer_cache_index_.push_back(static_cast<int>(kv_.size()));
      cpu::KvLayer& kv = kv_.emplace_back();
      kv.k.assign(kv_floats, 0.0f);
      kv.v.assign(kv_floats, 0.0f);
    }
  }
  if (weights_.has_mtp && last_stage()) {
    mtp_kv_.k.assign(kv_floats, 0.0f);
    mtp_kv_.v.assign(kv_floats, 0.0f);
  }
}

int64_t CpuBackend::kv_cache_bytes() const {
  int64_t floats = 0;
  for (const cpu::KvLayer& kv : kv_) floats += static_cast<int64_t>(kv.k.size() + kv.v.size());
  floats += static_cast<int64_t>(mtp_kv_.k.size() + mtp_kv_.v.size());
  return floats * 4;
}

int64_t CpuBackend::state_bytes() const {
  int64_t floats = 0;
  for (const cpu::GdnStateLayer& s : gdn_state_)
    floats += static_cast<int64_t>(s.conv.size() + s.delta.size());
  return floats * 4;
}

const float* CpuBackend::delta_state(int gdn_layer, int32_t slot) const {
  const ModelConfig& c = config_;
  return gdn_state_.at(static_cast<size_t>(gdn_layer)).delta.data() +
         static_cast<size_t>(live_entry_.at(static_cast<size_t>(slot))) *
             static_cast<size_t>(c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim);
}

const float* CpuBackend::conv_state(int gdn_layer, int32_t slot) const {
  const ModelConfig& c = config_;
  return gdn_state_.at(static_cast<size_t>(gdn_layer)).conv.data() +
         static_cast<size_t>(live_entry_.at(static_cast<size_t>(slot))) *
             static_cast<size_t>((c.conv_kernel - 1) * c.conv_channels());
}

void CpuBackend::reset_slot(int32_t slot) {
  live_entry_[static_cast<size_t>(slot)] = static_cast<int32_t>(slot * entries_per_slot_);
  for (size_t g = 0; g < gdn_state_.size(); ++g) {
    float* conv = const_cast<float*>(conv_state(static_cast<int>(g), slot));
    float* delta = const_cast<float*>(delta_state(static_cast<int>(g), slot));
    const ModelConfig& c = config_;
    std::fill(conv, conv + (c.conv_kernel - 1) * c.conv_channels(), 0.0f);
    std::fill(delta, delta + c.ssm_v_heads * c.ssm_head_dim * c.ssm_head_dim, 0.0f);
  }
}

// The plan comes from our own scheduler, but a wrong plan must fail loudly, never write
// outside a cache.
void CpuBackend::check_plan(const BatchPlan& plan) const { check_plan_sequences(plan, cache_, config_.num_vocab); }

void CpuBackend::check_rows(size_t index, const std::vector<int32_t>& tokens, int64_t first_position,
                            const std::vector<int32_t>& kv_blocks) const {
  check_plan_rows(index, tokens, first_position, kv_blocks, cache_, config_.num_vocab);
}

void CpuBackend::lm_head(const float* x, const std::vector<int64_t>& hidden_rows, const std::vector<int64_t>& logit_rows,
                         const std::vector<const kernels::DrawParams*>& draws, const TensorView& norm, ForwardOutput& out) {
  const int64_t h = config_.num_embd, m = static_cast<int64_t>(hidden_rows.size());
  out.hidden.resize(static_cast<size_t>(m * h));
  for (int64_t i = 0; i < m; ++i)
    std::copy_n(x + hidden_rows[static_cast<size_t>(i)] * h, h, out.hidden.data() + i * h);
  kernels::rms_norm_ref({out.hidden.data(), h, cpu::f32_data(norm), out.hidden.data(), h, m, h, config_.rms_eps}, pool_);
  // Logit rows are the last rows of each sequence's hidden rows: gather their normed copies.
  const int64_t n = static_cast<int64_t>(logit_rows.size());
  std::vector<float> normed(static_cast<size_t>(n * h));
  for (int64_t i = 0, j = 0; i < n; ++i) {
    while (hidden_rows[static_cast<size_t>(j)] != logit_rows[static_cast<size_t>(i)]) ++j;
    std::copy_n(out.hidden.data() + j * h, h, normed.data() + i * h);
  }
  // Every logit row is computed; out.logits keeps only the host rows (out's layout, set by
  // the caller), argmax_ids every row.
  const int64_t v = config_.num_vocab;
  const bool all_to_host = out.num_host_rows_planned() == n;
  std::vector<float>& all = all_to_host ? out.logits : logit_scratch_;
  all.resize(static_cast<size_t>(n * v));
  cpu::LayerContext ctx{config_, pool_, cache_.kv_block_tokens, chunked_gdn_prefill()};
  cpu::matmul(ctx, weights_.output, normed.data(), n, all.data());
  out.argmax_ids.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.argmax_ids[static_cast<size_t>(i)] = argmax_token(all.data() + i * v, v);
  // Drawn rows side by side (each a pass over the vocabulary; each draw its own row's).
  out.drawn_ids.assign(static_cast<size_t>(n), -1);
  pool_.run(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const kernels::DrawParams* p = draws[static_cast<size_t>(i)];
      if (p != nullptr) out.drawn_ids[static_cast<size_t>(i)] = kernels::draw_ref(all.data() + i * v, v, *p);
    }
  });
  if (all_to_host) return;
  out.logits.resize(static_cast<size_t>(out.num_host_rows_planned() * v));
  for (size_t s = 0; s < out.logit_begin.size(); ++s) {
    if (out.host_logit_begin[s] < 0) continue;
    std::copy_n(all.data() + out.logit_begin[s] * v, out.sequence_logit_rows(s) * v,
                out.logits.data() + out.host_logit_begin[s] * v);
  }
}

void CpuBackend::forward(const BatchPlan& plan, ForwardOutput& out) {
  check_plan(plan);
  cpu::StepRows rows;
  std::vector<int64_t> logit_rows, hidden_rows;
  std::vector<const kernels::DrawParams*> draws;  // per logit row
  const int64_t planned_rows = plan.num_rows();
  if (!first_stage() && static_cast<int64_t>(activations_.size()) != planned_rows * config_.num_embd)
    throw std::logic_error("layer-split stage from layer " + std::to_string(layers_.first) +
                           ": the previous device's activations do not match the plan's rows");
  if (last_stage()) out.begin_layout(config_.num_vocab);
  for (const SequenceStep& s : plan.sequences) {
    if (s.num_cached_tokens == 0) reset_slot(s.slot);
    const size_t slot = static_cast<size_t>(s.slot);
    verify_rows_[slot] = s.keep_row_states ? static_cast<int32_t>(s.tokens.size()) : 0;
    const int64_t begin = rows.num_rows(), count = static_cast<int64_t>(s.tokens.size());
    cpu::SequenceRows& seq = rows.sequences.emplace_back();
    seq = {begin, count, s.slot, s.num_cached_tokens, &s.kv_blocks, s.keep_row_states};
    seq.state_entry = live_entry_[slot];
    if (s.keep_row_states) {
      // Verify rows: snapshots into the bank the live entry is not in; the live state becomes
      // the last row's snapshot (rollback moves it back to an earlier one).
      const int32_t base = static_cast<int32_t>(s.slot * entries_per_slot_);
      const int32_t bank = (live_entry_[slot] - base) / cache_.max_verify_rows;
      seq.ring_first = base + (1 - bank) * cache_.max_verify_rows;
      ring_first_[slot] = seq.ring_first;
      live_entry_[slot] = seq.ring_first + static_cast<int32_t>(count) - 1;
    }
    for (int64_t i = 0; i < count; ++i) {
      rows.tokens.push_back(s.tokens[static_cast<size_t>(i)]);
      rows.positions.push_back(s.num_cached_tokens + static_cast<int32_t>(i));
    }
    if (last_stage()) out.add_sequence(s.num_logits, std::max(s.num_logits, s.num_hidden), s.logits_to_host);
    for (int64_t i = count - s.num_logits; i < count; ++i) logit_rows.push_back(begin + i);
    for (int32_t j = 0; j < s.num_logits; ++j) draws.push_back(s.draws.empty() ? nullptr : &s.draws[static_cast<size_t>(j)]);
    for (int64_t i = count - std::max(s.num_logits, s.num_hidden); i < count; ++i) hidden_rows.push_back(begin + i);
  }

  // The residual stream lives in activations_: the first stage embeds into it, a later one
  // finds the previous device's output there (stage_input), a stage that is not last leaves
  // its output there (stage_output).
  const int64_t n = rows.num_rows(), h = config_.num_embd;
  if (first_stage()) {
    activations_.resize(static_cast<size_t>(n * h));
    kernels::embedding_lookup_ref(weights_.token_embd.data, weights_.token_embd.type, h, rows.tokens.data(), n,
                                  activations_.data());
  }
  LayerCapture capture;
  if (!plan.capture_layers.empty()) {
    if (!first_stage() || !last_stage())
      throw std::logic_error("layer capture (the DFlash drafter's context) needs the whole trunk on one device; a layer split does not capture");
    capture = {&plan.capture_layers, &hidden_rows, &out.layer_hidden};
    out.layer_hidden.assign(hidden_rows.size() * plan.capture_layers.size() * static_cast<size_t>(h), 0.0f);
  } else {
    out.layer_hidden.clear();
  }
  run_layers(rows, activations_.data(), capture);
  if (last_stage()) lm_head(activations_.data(), hidden_rows, logit_rows, draws, weights_.output_norm, out);
}

void CpuBackend::run_layers(const cpu::StepRows& rows, float* x, const LayerCapture& capture) {
  const ModelConfig& c = config_;
  const int64_t n = rows.num_rows(), h = c.num_embd;
  std::vector<float> a(static_cast<size_t>(n * h)), y(a.size());
  const cpu::LayerContext ctx{c, pool_, cache_.kv_block_tokens, chunked_gdn_prefill()};
  for (int64_t i = layers_.first; i < layers_.end; ++i) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(i)];
    const size_t cache_index = static_cast<size_t>(layer_cache_index_[static_cast<size_t>(i)]);
    kernels::rms_norm_ref({x, h, cpu::f32_data(lw.attn_norm), a.data(), h, n, h, c.rms_eps}, pool_);
    if (lw.kind == LayerKind::GatedDeltaNet) {
      cpu::gdn_forward(ctx, lw.gdn, gdn_state_[cache_index], rows, a.data(), y.data());
    } else {
      cpu::attention_forward(ctx, lw.attention, kv_[cache_index], rows, a.data(), y.data());
    }
    add_rows(x, y.data(), n * h);
    kernels::rms_norm_ref({x, h, cpu::f32_data(lw.post_attention_norm), a.data(), h, n, h, c.rms_eps}, pool_);
    cpu::ffn_forward(ctx, lw.ffn, n, a.data(), y.data());
    add_rows(x, y.data(), n * h);
    if (capture.layers == nullptr) continue;
    const auto& layers = *capture.layers;
    const auto at = std::find(layers.begin(), layers.end(), static_cast<int32_t>(i));
    if (at == layers.end()) continue;
    const auto k = static_cast<int64_t>(at - layers.begin()), num_layers = static_cast<int64_t>(layers.size());
    for (size_t r = 0; r < capture.rows->size(); ++r)
      std::copy_n(x + (*capture.rows)[r] * h, h, capture.captured->data() + (static_cast<int64_t>(r) * num_layers + k) * h);
  }
}

ActivationBuffer CpuBackend::stage_input(int64_t num_rows) {
  if (first_stage()) throw std::logic_error("the first stage of a layer split embeds its tokens; it takes no activations");
  if (num_rows < 0) throw std::invalid_argument("stage_input: negative row count");
  activations_.resize(static_cast<size_t>(num_rows * config_.num_embd));
  return {activations_.data(), static_cast<int64_t>(activations_.size() * sizeof(float)), device_};
}

ActivationBuffer CpuBackend::stage_output() {
  return {activations_.data(), static_cast<int64_t>(activations_.size() * sizeof(float)), device_};
}

BackendMemoryStats CpuBackend::memory_stats() const {
  BackendMemoryStats stats;
  stats.host_bytes_held = range_weight_bytes(weights_, layers_) + kv_cache_bytes() + state_bytes() +
                          checkpoint_bytes_held() + static_cast<int64_t>(activations_.capacity() * sizeof(float));
  return stats;
}

void CpuBackend::rollback(int32_t slot, int32_t num_rows_kept) {
  if (slot < 0 || slot >= cache_.num_state_slots) throw std::invalid_argument("rollback: slot out of range");
  const int32_t rows = verify_rows_[static_cast<size_t>(slot)];
  if (num_rows_kept < 1 || num_rows_kept > rows)
    throw std::invalid_argument("rollback: slot " + std::to_string(slot) + " kept " + std::to_string(num_rows_kept) +
                                " rows of a verify step of " + std::to_string(rows));
  verify_rows_[static_cast<size_t>(slot)] = 0;
  // An index move: the ring entry already holds the state after that row.
  live_entry_[static_cast<size_t>(slot)] = ring_first_[static_cast<size_t>(slot)] + num_rows_kept - 1;
}

void CpuBackend::forward_mtp(const MtpPlan& plan, ForwardOutput& out) {
  if (!weights_.has_mtp) throw std::logic_error("this model has no MTP head");
  if (!last_stage()) throw std::logic_error("the MTP head runs on the last device of a layer split");
  const ModelConfig& c = config_;
  const int64_t h = c.num_embd;
  cpu::StepRows rows;
  std::vector<int64_t> logit_rows;
  std::vector<const kernels::DrawParams*> draws;  // per logit row
  std::vector<float> hidden;
  out.begin_layout(c.num_vocab);
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const MtpSequenceStep& s = plan.sequences[i];
    const int64_t begin = rows.num_rows(), count = static_cast<int64_t>(s.tokens.size());
    if (count == 0 || static_cast<int64_t>(s.hidden.size()) != count * h)
      throw std::invalid_argument(plan_sequence_error(i, "MTP rows need one hidden vector per token"));
    if (s.num_logits < 0 || s.num_logits > count) throw std::invalid_argument(plan_sequence_error(i, "num_logits out of range"));
    check_rows(i, s.tokens, s.num_cached_rows, s.kv_blocks);
    rows.sequences.push_back({begin, count, 0, s.num_cached_rows, &s.kv_blocks});
    for (int64_t r = 0; r < count; ++r) {
      rows.tokens.push_back(s.tokens[static_cast<size_t>(r)]);
      rows.positions.push_back(s.num_cached_rows + static_cast<int32_t>(r));
    }
    hidden.insert(hidden.end(), s.hidden.begin(), s.hidden.end());
    if (!s.draws.empty() && static_cast<int32_t>(s.draws.size()) != s.num_logits)
      throw std::invalid_argument(plan_sequence_error(i, "draws must be one per logit row"));
    out.add_sequence(s.num_logits, s.num_logits, s.logits_to_host);  // MTP: hidden rows == logit rows
    for (int64_t r = count - s.num_logits; r < count; ++r) logit_rows.push_back(begin + r);
    for (int32_t j = 0; j < s.num_logits; ++j) draws.push_back(s.draws.empty() ? nullptr : &s.draws[static_cast<size_t>(j)]);
  }

  const MtpWeights& mw = weights_.mtp;
  const int64_t n = rows.num_rows();
  // u = eh_proj [enorm(embedding) | hnorm(hidden)]: embedding first (MODEL.md 4.2).
  std::vector<float> emb(static_cast<size_t>(n * h)), cat(static_cast<size_t>(n * 2 * h));
  kernels::embedding_lookup_ref(weights_.token_embd.data, weights_.token_embd.type, h, rows.tokens.data(), n, emb.data());
  kernels::rms_norm_ref({emb.data(), h, cpu::f32_data(mw.enorm), cat.data(), 2 * h, n, h, c.rms_eps}, pool_);
  kernels::rms_norm_ref({hidden.data(), h, cpu::f32_data(mw.hnorm), cat.data() + h, 2 * h, n, h, c.rms_eps}, pool_);
  const cpu::LayerContext ctx{c, pool_, cache_.kv_block_tokens, chunked_gdn_prefill()};
  std::vector<float> u(static_cast<size_t>(n * h)), a(u.size()), y(u.size());
  cpu::matmul(ctx, mw.eh_proj, cat.data(), n, u.data());

  const LayerWeights& lw = mw.layer;
  kernels::rms_norm_ref({u.data(), h, cpu::f32_data(lw.attn_norm), a.data(), h, n, h, c.rms_eps}, pool_);
  cpu::attention_forward(ctx, lw.attention, mtp_kv_, rows, a.data(), y.data());
  add_rows(u.data(), y.data(), n * h);
  kernels::rms_norm_ref({u.data(), h, cpu::f32_data(lw.post_attention_norm), a.data(), h, n, h, c.rms_eps}, pool_);
  cpu::ffn_forward(ctx, lw.ffn, n, a.data(), y.data());
  add_rows(u.data(), y.data(), n * h);
  lm_head(u.data(), logit_rows, logit_rows, draws, mw.shared_head_norm, out);
}

}  // namespace deltaserve::runtime
