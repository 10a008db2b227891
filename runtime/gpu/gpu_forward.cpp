// GpuBackend's forward passes: plan checks (the CPU backend's, plus this backend's fixed
// bounds), the step's index arrays staged in the pinned arena and sent with one copy, every
// layer on one stream, the requested rows back with one copy and one synchronisation.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/elementwise/elementwise_gpu.h"
#include "kernels/embedding/embedding_gpu.h"
#include "kernels/sampling/draw_gpu.h"
#include "kernels/sampling/sampling_gpu.h"
#include "kernels/step_ops/step_ops_gpu.h"
#include "runtime/gpu/gpu_backend.h"
#include "runtime/plan_checks.h"

namespace deltaserve::runtime {
namespace {

// Output rows of one sequence of count rows starting at step row begin (CpuBackend's rule):
// hidden rows are its last max(num_hidden, num_logits) rows, logit rows its last num_logits.
void add_output_rows(int64_t begin, int64_t count, int32_t num_logits, int32_t num_hidden, std::vector<int32_t>& hidden_rows,
                     std::vector<int32_t>& logit_index) {
  const int64_t num_h = std::max(num_logits, num_hidden);
  const int64_t first_hidden = static_cast<int64_t>(hidden_rows.size());
  for (int64_t i = count - num_h; i < count; ++i) hidden_rows.push_back(static_cast<int32_t>(begin + i));
  for (int64_t j = num_h - num_logits; j < num_h; ++j) logit_index.push_back(static_cast<int32_t>(first_hidden + j));
}

// The output buffer (device, and the pinned arena's output region alike), in floats:
// [hidden rows][H] | [logit rows] int32 argmax ids | [logit rows] int32 drawn ids | [hidden
// rows][captured layers][H] (ForwardOutput::layer_hidden's layout) | [logit rows][V] logits;
// each piece 16-byte aligned. Hidden rows, ids and captured layers come back in one copy.
struct OutputOffsets {
  int64_t ids = 0;
  int64_t drawn = 0;
  int64_t captured = 0;
  int64_t logits = 0;
};
OutputOffsets output_offsets(int64_t num_hidden, int64_t h, int64_t num_logits, int64_t num_captured) {
  OutputOffsets at;
  at.ids = (num_hidden * h + 3) / 4 * 4;
  at.drawn = at.ids + (num_logits + 3) / 4 * 4;
  at.captured = at.drawn + (num_logits + 3) / 4 * 4;
  at.logits = at.captured + (num_hidden * num_captured * h + 3) / 4 * 4;
  return at;
}

}  // namespace

// Sequences staged decode and verify rows first, then prefill chunks, each group in plan order.
GpuBackend::StagedOrder GpuBackend::staged_order(const std::vector<int64_t>& counts, const std::vector<bool>& prefill) {
  StagedOrder order;
  order.first_row.assign(counts.size(), 0);
  int64_t row = 0;
  for (const bool pass : {false, true})
    for (size_t i = 0; i < counts.size(); ++i) {
      if (prefill[i] != pass) continue;
      order.seqs.push_back(i);
      order.first_row[i] = row;
      row += counts[i];
      if (!pass) ++order.num_decode_seqs;
    }
  return order;
}

// This backend's KV pool holds max_context tokens per sequence at most.
static void check_within_pool(size_t index, int64_t end_position, int64_t max_context) {
  if (end_position > max_context)
    throw std::invalid_argument(plan_sequence_error(index, "positions past the KV pool (" + std::to_string(max_context) + " tokens)"));
}

void GpuBackend::check_rows(size_t index, const std::vector<int32_t>& tokens, int64_t first_position,
                            const std::vector<int32_t>& kv_blocks) const {
  check_plan_rows(index, tokens, first_position, kv_blocks, cache_, config_.num_vocab);
  check_within_pool(index, first_position + static_cast<int64_t>(tokens.size()), max_context_);
}

void GpuBackend::check_plan(const BatchPlan& plan) const {
  check_plan_sequences(plan, cache_, config_.num_vocab);
  int64_t logit_rows = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const SequenceStep& s = plan.sequences[i];
    check_within_pool(i, s.num_cached_tokens + static_cast<int64_t>(s.tokens.size()), max_context_);
    logit_rows += s.num_logits;
  }
  if (plan.num_rows() > max_rows_)
    throw std::invalid_argument("batch plan: " + std::to_string(plan.num_rows()) + " rows, more than this GPU backend's " +
                                std::to_string(max_rows_) + " rows per step (CacheConfig::max_step_rows)");
  if (logit_rows > max_logit_rows_)
    throw std::invalid_argument("batch plan: " + std::to_string(logit_rows) + " logit rows, more than this GPU backend's " +
                                std::to_string(max_logit_rows_) + " per step");
  const std::vector<int32_t>& layers = plan.capture_layers;
  if (static_cast<int64_t>(layers.size()) > cache_.max_capture_layers)
    throw std::invalid_argument("batch plan: captures " + std::to_string(layers.size()) + " layers, more than this GPU backend's " +
                                std::to_string(cache_.max_capture_layers) + " (CacheConfig::max_capture_layers)");
  for (size_t k = 0; k < layers.size(); ++k)
    if (layers[k] < 0 || layers[k] >= config_.num_layers || (k > 0 && layers[k] <= layers[k - 1]))
      throw std::invalid_argument("batch plan: capture layers must be increasing trunk layers");
}

gpu::StepRowsView GpuBackend::stage_common(const std::vector<const std::vector<int32_t>*>& tokens,
                                           const std::vector<int32_t>& first_positions,
                                           const std::vector<const std::vector<int32_t>*>& kv_blocks,
                                           const OutputRows& orows, int64_t num_decode_seqs, size_t& hidden_rows_at,
                                           size_t& logit_index_at) {
  gpu::StagingLayout& st = *staging_;
  const int64_t num_seqs = static_cast<int64_t>(tokens.size());
  int64_t n = 0, stride = 1, max_keys = 1;
  for (int64_t i = 0; i < num_seqs; ++i) {
    const int64_t count = static_cast<int64_t>(tokens[static_cast<size_t>(i)]->size());
    const int64_t end = first_positions[static_cast<size_t>(i)] + count;
    n += count;
    max_keys = std::max(max_keys, end);
    stride = std::max(stride, (end + cache_.kv_block_tokens - 1) / cache_.kv_block_tokens);
  }
  // Power-of-two buckets (entries past a sequence's blocks are never read): the staging layout,
  // and so a captured step graph, stays the same while contexts grow inside a bucket.
  int64_t bucket = 8;
  while (bucket < stride) bucket *= 2;
  stride = std::min<int64_t>(bucket, cache_.num_kv_blocks);
  const size_t tokens_at = st.push<int32_t>(n), positions_at = st.push<int32_t>(n), row_seq_at = st.push<int32_t>(n);
  const size_t begin_at = st.push<int32_t>(num_seqs + 1), tables_at = st.push<int32_t>(num_seqs * stride);
  const int64_t num_prefill_seqs = num_seqs - num_decode_seqs;
  const size_t prefill_begin_at = st.push<int32_t>(num_prefill_seqs + 1), prefill_first_at = st.push<int32_t>(num_prefill_seqs);
  hidden_rows_at = st.push<int32_t>(static_cast<int64_t>(orows.hidden_rows.size()));
  logit_index_at = st.push<int32_t>(static_cast<int64_t>(orows.logit_index.size()));
  int32_t* tok = st.host<int32_t>(tokens_at);
  int32_t* pos = st.host<int32_t>(positions_at);
  int32_t* seq = st.host<int32_t>(row_seq_at);
  int32_t* begin = st.host<int32_t>(begin_at);
  int32_t* tables = st.host<int32_t>(tables_at);
  int64_t r = 0;
  for (int64_t i = 0; i < num_seqs; ++i) {
    const std::vector<int32_t>& t = *tokens[static_cast<size_t>(i)];
    begin[i] = static_cast<int32_t>(r);
    for (size_t j = 0; j < t.size(); ++j, ++r) {
      tok[r] = t[j];
      pos[r] = first_positions[static_cast<size_t>(i)] + static_cast<int32_t>(j);
      seq[r] = static_cast<int32_t>(i);
    }
    // Entries past the blocks a sequence covers are never read; 0 keeps them valid ids.
    const std::vector<int32_t>& b = *kv_blocks[static_cast<size_t>(i)];
    const size_t used = std::min(b.size(), static_cast<size_t>(stride));
    int32_t* row = tables + i * stride;
    std::fill(row, row + stride, 0);
    std::copy_n(b.begin(), used, row);
  }
  begin[num_seqs] = static_cast<int32_t>(r);
  // Prefill chunks: row ranges relative to the first prefill row, first positions.
  int32_t* prefill_begin = st.host<int32_t>(prefill_begin_at);
  int32_t* prefill_first = st.host<int32_t>(prefill_first_at);
  int64_t max_prefill_rows = 0;
  for (int64_t j = 0; j <= num_prefill_seqs; ++j) {
    prefill_begin[j] = begin[num_decode_seqs + j] - begin[num_decode_seqs];
    if (j == num_prefill_seqs) break;
    prefill_first[j] = first_positions[static_cast<size_t>(num_decode_seqs + j)];
    max_prefill_rows = std::max<int64_t>(max_prefill_rows, begin[num_decode_seqs + j + 1] - begin[num_decode_seqs + j]);
  }
  std::copy(orows.hidden_rows.begin(), orows.hidden_rows.end(), st.host<int32_t>(hidden_rows_at));
  std::copy(orows.logit_index.begin(), orows.logit_index.end(), st.host<int32_t>(logit_index_at));

  gpu::StepRowsView rows;
  rows.num_rows = n;
  rows.num_seqs = num_seqs;
  rows.tokens = device<int32_t>(tokens_at);
  rows.positions = device<int32_t>(positions_at);
  rows.row_seq = device<int32_t>(row_seq_at);
  rows.seq_row_begin = device<int32_t>(begin_at);
  rows.block_tables = device<int32_t>(tables_at);
  rows.block_table_stride = stride;
  rows.max_keys = max_keys;
  rows.num_decode_seqs = num_decode_seqs;
  rows.num_decode_rows = begin[num_decode_seqs];
  rows.prefill_row_begin = device<int32_t>(prefill_begin_at);
  rows.prefill_first_position = device<int32_t>(prefill_first_at);
  rows.max_prefill_rows = max_prefill_rows;
  return rows;
}

namespace {

// The products that read a block's mixer input norm (gdn_forward's and attention_forward's
// input projections, in their order).
int mixer_inputs(const gpu::GpuLayerWeights& lw, const gpu::DeviceTensor* (&out)[4]) {
  if (lw.kind == LayerKind::GatedDeltaNet) {
    out[0] = &lw.gdn.qkv, out[1] = &lw.gdn.gate, out[2] = &lw.gdn.beta, out[3] = &lw.gdn.alpha;
    return 4;
  }
  out[0] = &lw.attention.q, out[1] = &lw.attention.k, out[2] = &lw.attention.v;
  return 3;
}

const gpu::DeviceTensor& mixer_output(const gpu::GpuLayerWeights& lw) {
  return lw.kind == LayerKind::GatedDeltaNet ? lw.gdn.output : lw.attention.output;
}

}  // namespace

bool GpuBackend::mixer_norm_deferred(const gpu::GpuLayerWeights& prev, const gpu::GpuLayerWeights& next) const {
  if (config_.is_moe()) return false;  // the MoE FFN's combine writes its norm (or the router takes it)
  const gpu::DeviceTensor* readers[4];
  const int count = mixer_inputs(next, readers);
  return gpu::norm_deferred(context(), prev.ffn.down, next.attn_norm, readers, count, false);
}

bool GpuBackend::ffn_norm_deferred(const gpu::GpuLayerWeights& lw) const {
  if (config_.is_moe()) return false;
  const gpu::DeviceTensor* readers[] = {&lw.ffn.gate, &lw.ffn.up};
  return gpu::norm_deferred(context(), mixer_output(lw), lw.post_attention_norm, readers, 2, true);
}

void GpuBackend::run_block(const gpu::GpuLayerWeights& lw, const gpu::KvPool* kv, const gpu::GdnStatePools* gdn,
                           const gpu::StepRowsView& rows, bool input_normed, const gpu::DeviceTensor* next_attn_norm,
                           bool input_deferred, bool next_deferred) {
  const gpu::GpuLayerContext ctx = context();
  const int64_t n = rows.num_rows, h = config_.num_embd;
  // The mixer's input norm: written by the previous block (input_normed; input_deferred: as a
  // deferred norm, which the input projections scale), carried into the mixer's input
  // projections (products_normalise_input: no launch of its own), or an rms_norm launch. Same
  // bits every way but the deferred one, which follows the matrices only (norm_deferred).
  const bool carried = gpu::products_normalise_input(ctx, gpu::row_split(rows));
  if (!input_normed && !carried) gpu::rms_norm(ctx, lw.attn_norm, ws_.x, n, ws_.a, h);
  gpu::InputNorm mixer_in = !input_normed && carried ? gpu::InputNorm{&lw.attn_norm, ws_.x, ws_.a} : gpu::InputNorm{};
  mixer_in.deferred = input_normed && input_deferred;
  // The FFN's input norm: deferred between the mixer's output projection and a dense FFN's
  // gate/up launch (ffn_norm_deferred), in the MoE router's launch for short steps, carried
  // into a dense FFN's gate/up launch, else after the mixer's output projection (an rms_norm
  // launch, or its epilogue).
  const bool ffn_deferred = ffn_norm_deferred(lw);
  const bool ffn_norms_input = !ffn_deferred && gpu::ffn_normalises_input(ctx, gpu::row_split(rows));
  gpu::NextNorm post = ffn_norms_input ? gpu::NextNorm{} : gpu::NextNorm{&lw.post_attention_norm, ws_.a, h};
  post.deferred = ffn_deferred;
  if (gdn != nullptr) {
    gpu::gdn_forward(ctx, lw.gdn, *gdn, rows, ws_.a, ws_.x, post, mixer_in);
  } else {
    gpu::attention_forward(ctx, lw.attention, *kv, rows, ws_.a, ws_.x, post, mixer_in);
  }
  gpu::FfnInputNorm in = ffn_norms_input ? gpu::FfnInputNorm{&lw.post_attention_norm, ws_.a} : gpu::FfnInputNorm{};
  in.deferred = ffn_deferred;
  // Where the next block's mixer carries its input norm, nothing writes it here (a deferred
  // one is always written here).
  const gpu::DeviceTensor* next_norm = carried && !next_deferred ? nullptr : next_attn_norm;
  gpu::NextNorm next{next_norm, ws_.a, h};
  next.deferred = next_norm != nullptr && next_deferred;
  gpu::ffn_forward(ctx, lw.ffn, gpu::row_split(rows), ws_.a, ws_.x, next, in);
}

// Final norm of the hidden rows of ws_.x and the LM head for the logit rows (a subset of
// them), into the output buffer.
void GpuBackend::lm_head_enqueue(const gpu::DeviceTensor& norm, const int32_t* hidden_rows, int64_t num_hidden,
                                 const int32_t* logit_index, int64_t num_logits, int64_t num_captured) {
  const gpu::GpuLayerContext ctx = context();
  const int64_t h = config_.num_embd, v = config_.num_vocab;
  const OutputOffsets at = output_offsets(num_hidden, h, num_logits, num_captured);
  float* hidden = output_device_;
  float* logits = output_device_ + at.logits;
  int32_t* ids = reinterpret_cast<int32_t*>(output_device_ + at.ids);
  DS_GPU_LAUNCH(ctx, 1, kernels::gather_rows_gpu(ws_.x, h, hidden_rows, num_hidden, h, hidden, h, stream_),
                "gather hidden rows %lld", static_cast<long long>(num_hidden));
  gpu::rms_norm(ctx, norm, hidden, num_hidden, hidden, h);
  DS_GPU_LAUNCH(ctx, 1, kernels::gather_rows_gpu(hidden, h, logit_index, num_logits, h, ws_.lm_in, h, stream_),
                "gather logit rows %lld", static_cast<long long>(num_logits));
  gpu::matmul(ctx, weights_->output, ws_.lm_in, num_logits, logits);
  // Greedy ids of every logit row, on the device (the workspace counters stay zero).
  if (num_logits > 0)
    DS_GPU_LAUNCH(ctx, 1, kernels::argmax_gpu(kernels::ArgmaxGpuArgs{logits, v, num_logits, v, ids, argmax_ws_, max_logit_rows_}, stream_),
                  "argmax %lld logit rows", static_cast<long long>(num_logits));
}

GpuBackend::StagedDraws GpuBackend::stage_draws(const std::vector<const std::vector<kernels::DrawParams>*>& per_sequence,
                                                const ForwardOutput& out) {
  StagedDraws staged;
  for (const auto* d : per_sequence) staged.count += static_cast<int64_t>(d->size());
  if (staged.count == 0) return staged;
  staged.rows_at = staging_->push<int32_t>(staged.count);
  staged.params_at = staging_->push<kernels::DrawParams>(staged.count);
  int32_t* rows = staging_->host<int32_t>(staged.rows_at);
  kernels::DrawParams* params = staging_->host<kernels::DrawParams>(staged.params_at);
  int64_t k = 0;
  for (size_t i = 0; i < per_sequence.size(); ++i) {
    for (size_t j = 0; j < per_sequence[i]->size(); ++j, ++k) {
      rows[k] = static_cast<int32_t>(out.logit_begin[i] + static_cast<int64_t>(j));
      params[k] = (*per_sequence[i])[j];
    }
  }
  return staged;
}

// After the LM head (eager, outside any step graph: the draws change every step): the drawn
// ids of the staged rows, into the output buffer's drawn ids.
void GpuBackend::draw_enqueue(const StagedDraws& draws, int64_t num_hidden, int64_t num_logits, int64_t num_captured) {
  if (draws.count == 0) return;
  const gpu::GpuLayerContext ctx = context();
  const int64_t v = config_.num_vocab;
  const OutputOffsets at = output_offsets(num_hidden, config_.num_embd, num_logits, num_captured);
  const kernels::DrawGpuArgs args{output_device_ + at.logits, v, v, device<int32_t>(draws.rows_at),
                                  device<kernels::DrawParams>(draws.params_at),
                                  reinterpret_cast<int32_t*>(output_device_ + at.drawn), draws.count};
  DS_GPU_LAUNCH(ctx, 1, kernels::draw_gpu(args, stream_), "draw %lld logit rows", static_cast<long long>(draws.count));
}

// The output rows to the host: hidden rows, argmax ids, drawn ids and captured layers in one
// copy, the logits of the host rows (out's layout: sequences with logits_to_host) in one copy
// per run of such sequences; the only device->host copies and the only synchronisation of a
// forward.
void GpuBackend::lm_head_finish(int64_t num_hidden, int64_t num_logits, int64_t num_captured, const StagedDraws& draws,
                                ForwardOutput& out) {
  const int64_t h = config_.num_embd, v = config_.num_vocab;
  const OutputOffsets at = output_offsets(num_hidden, h, num_logits, num_captured);
  const size_t head_floats = static_cast<size_t>(num_captured > 0 ? at.captured + num_hidden * num_captured * h
                                                 : num_logits == 0 ? num_hidden * h
                                                 : draws.count > 0 ? at.drawn + num_logits
                                                                   : at.ids + num_logits);
  const size_t floats = std::max(head_floats, static_cast<size_t>(num_logits > 0 ? at.logits + num_logits * v : 0));
  if (floats > output_floats_ || out.num_rows != num_logits)
    throw std::logic_error("GPU backend: output rows exceed the output buffer or the output layout");
  float* host = pinned_->output();
  int64_t bytes = 0;
  if (head_floats > 0) {
    DS_GPU_CHECK(gpuMemcpyAsync(host, output_device_, head_floats * sizeof(float), gpuMemcpyDeviceToHost, stream_),
                 "hidden rows, ids and captured layers, %zu floats", head_floats);
    bytes += static_cast<int64_t>(head_floats * sizeof(float));
  }
  const size_t num_seqs = out.logit_begin.size();
  for (size_t s = 0; s < num_seqs;) {
    if (out.host_logit_begin[s] < 0) {
      ++s;
      continue;
    }
    const int64_t first = out.logit_begin[s];
    int64_t rows = 0;
    for (; s < num_seqs && out.host_logit_begin[s] >= 0; ++s) rows += out.sequence_logit_rows(s);
    if (rows == 0) continue;
    const size_t offset = static_cast<size_t>(at.logits + first * v), count = static_cast<size_t>(rows * v);
    DS_GPU_CHECK(gpuMemcpyAsync(host + offset, output_device_ + offset, count * sizeof(float), gpuMemcpyDeviceToHost, stream_),
                 "logit rows %lld..%lld", static_cast<long long>(first), static_cast<long long>(first + rows));
    bytes += static_cast<int64_t>(count * sizeof(float));
  }
  DS_GPU_CHECK(gpuStreamSynchronize(stream_), "forward of %lld hidden / %lld logit rows", static_cast<long long>(num_hidden),
               static_cast<long long>(num_logits));
  bytes_to_host_last_forward_ = bytes;
  out.hidden.assign(host, host + num_hidden * h);
  out.layer_hidden.assign(host + at.captured, host + at.captured + num_hidden * num_captured * h);
  const int32_t* ids = reinterpret_cast<const int32_t*>(host + at.ids);
  out.argmax_ids.assign(ids, ids + num_logits);
  out.drawn_ids.assign(static_cast<size_t>(num_logits), -1);
  const int32_t* drawn = reinterpret_cast<const int32_t*>(host + at.drawn);
  const int32_t* drawn_rows = draws.count > 0 ? staging_->host<int32_t>(draws.rows_at) : nullptr;
  for (int64_t k = 0; k < draws.count; ++k) out.drawn_ids[static_cast<size_t>(drawn_rows[k])] = drawn[drawn_rows[k]];
  out.logits.resize(static_cast<size_t>(out.num_host_rows_planned() * v));
  for (size_t s = 0; s < num_seqs; ++s) {
    if (out.host_logit_begin[s] < 0) continue;
    std::copy_n(host + at.logits + out.logit_begin[s] * v, out.sequence_logit_rows(s) * v,
                out.logits.data() + out.host_logit_begin[s] * v);
  }
}

void GpuBackend::enqueue_trunk(const gpu::StepRowsView& rows, size_t hidden_at, int64_t num_hidden, size_t logit_at,
                               int64_t num_logits, const std::vector<int32_t>& capture_layers) {
  const ModelConfig& c = config_;
  const gpu::GpuLayerContext ctx = context();
  const gpu::DeviceTensor& emb = weights_->token_embd;
  DS_GPU_LAUNCH(ctx, 1, kernels::embedding_lookup_gpu(emb.data, emb.type, c.num_embd, rows.tokens, rows.num_rows, ws_.x, stream_),
                "embedding %lld rows", static_cast<long long>(rows.num_rows));
  // Each block's FFN also writes the next block's attn_norm into ws_.a (MoE: inside the
  // combine launch), so blocks after the first skip their own; not where the mixers carry
  // their input norms (run_block).
  // A deferred norm between two blocks (mixer_norm_deferred) is always written by the first.
  const bool carried = gpu::products_normalise_input(ctx, gpu::row_split(rows));
  const auto layer = [&](int64_t i) -> const gpu::GpuLayerWeights& { return weights_->layers[static_cast<size_t>(i)]; };
  bool input_deferred = false;
  const int64_t num_captured = static_cast<int64_t>(capture_layers.size());
  float* captured = output_device_ + output_offsets(num_hidden, c.num_embd, num_logits, num_captured).captured;
  size_t next_capture = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const gpu::GpuLayerWeights& lw = layer(i);
    const size_t index = static_cast<size_t>(layer_cache_index_[static_cast<size_t>(i)]);
    const bool last = i + 1 == c.num_layers;
    const gpu::DeviceTensor* next_norm = last ? nullptr : &layer(i + 1).attn_norm;
    const bool next_deferred = !last && mixer_norm_deferred(lw, layer(i + 1));
    const bool input_normed = i > 0 && (input_deferred || !carried);
    if (lw.kind == LayerKind::GatedDeltaNet) {
      run_block(lw, nullptr, &gdn_[index], rows, input_normed, next_norm, input_deferred, next_deferred);
    } else {
      run_block(lw, &kv_[index], nullptr, rows, input_normed, next_norm, input_deferred, next_deferred);
    }
    input_deferred = next_deferred;
    // Layer capture (BatchPlan::capture_layers): the hidden rows of ws_.x, the residual stream
    // after block i (the CPU's x after its second add), in every form. Every product that adds
    // into the residual (the mixer's output projection, the dense down product, the MoE
    // combine or fused down+combine; matvec, exact tile or tiled prefill) accumulates into
    // ws_.x in place before the block returns; the fused, carried and deferred norms change only
    // where and how the next norm reaches ws_.a (unscaled x * w rows with their sums of
    // squares when deferred), never the sum. So no form needs to run unfused for capture. The
    // gather is one launch on the step's stream like the rest, so a step graph records it: its
    // source, its index array (a staging offset) and its destination (an output offset) follow
    // from the graph's key.
    if (next_capture < capture_layers.size() && capture_layers[next_capture] == i) {
      if (num_hidden > 0)
        DS_GPU_LAUNCH(ctx, 1,
                      kernels::gather_rows_gpu(ws_.x, c.num_embd, device<int32_t>(hidden_at), num_hidden, c.num_embd,
                                               captured + static_cast<int64_t>(next_capture) * c.num_embd,
                                               num_captured * c.num_embd, stream_),
                      "gather captured layer %lld, %lld rows", static_cast<long long>(i), static_cast<long long>(num_hidden));
      ++next_capture;
    }
  }
  lm_head_enqueue(weights_->output_norm, device<int32_t>(hidden_at), num_hidden, device<int32_t>(logit_at), num_logits,
                  num_captured);
}

void GpuBackend::forward(const BatchPlan& plan, ForwardOutput& out) {
  check_plan(plan);
  DS_GPU_CHECK(gpuSetDevice(device_), "device %d", device_);
  timeline_->begin(stream_);
  staging_->clear();
  const size_t num_seqs = plan.sequences.size();
  OutputRows orows;
  std::vector<const std::vector<int32_t>*> tokens, blocks;
  std::vector<int32_t> first_positions;
  out.begin_layout(config_.num_vocab);
  const size_t in_at = staging_->push<int32_t>(static_cast<int64_t>(num_seqs));
  const size_t out_at = staging_->push<int32_t>(static_cast<int64_t>(num_seqs));
  const size_t ring_at = staging_->push<int32_t>(static_cast<int64_t>(num_seqs));
  int32_t* state_in = staging_->host<int32_t>(in_at);
  int32_t* state_out = staging_->host<int32_t>(out_at);
  int32_t* ring = staging_->host<int32_t>(ring_at);
  std::vector<int64_t> counts;
  std::vector<bool> prefill;
  for (const SequenceStep& s : plan.sequences) {
    counts.push_back(static_cast<int64_t>(s.tokens.size()));
    prefill.push_back(is_prefill_chunk(static_cast<int64_t>(s.tokens.size()), s.keep_row_states, kTrunkPrefillMinRows));
  }
  const StagedOrder order = staged_order(counts, prefill);
  for (size_t j = 0; j < num_seqs; ++j) {
    const SequenceStep& s = plan.sequences[order.seqs[j]];
    const size_t slot = static_cast<size_t>(s.slot);
    const int64_t count = static_cast<int64_t>(s.tokens.size());
    if (s.num_cached_tokens == 0) reset_slot(s.slot);  // enqueued before this step's layers
    // GDN entries: in place, or (verify rows) from the live entry into the other bank.
    const int32_t live = live_entry_[slot];
    state_in[j] = live;
    if (s.keep_row_states) {
      const int32_t base = static_cast<int32_t>(s.slot * entries_per_slot_);
      const int32_t bank = (live - base) / cache_.max_verify_rows;
      ring[j] = base + (1 - bank) * cache_.max_verify_rows;
      state_out[j] = -1;  // the state after the last row is its ring entry
      ring_first_[slot] = ring[j];
      live_entry_[slot] = ring[j] + static_cast<int32_t>(count) - 1;
      verify_rows_[slot] = static_cast<int32_t>(count);
    } else {
      ring[j] = -1;
      state_out[j] = live;
      verify_rows_[slot] = 0;
    }
    tokens.push_back(&s.tokens);
    blocks.push_back(&s.kv_blocks);
    first_positions.push_back(s.num_cached_tokens);
  }
  // Output rows in plan order, wherever the sequence's rows were staged.
  for (size_t i = 0; i < num_seqs; ++i) {
    const SequenceStep& s = plan.sequences[i];
    out.add_sequence(s.num_logits, std::max(s.num_logits, s.num_hidden), s.logits_to_host);
    add_output_rows(order.first_row[i], counts[i], s.num_logits, s.num_hidden, orows.hidden_rows, orows.logit_index);
  }
  // Graph-eligible: every sequence has the same row count, at most a verify step's, and no
  // prefill chunk.
  int64_t uniform_rows = num_seqs > 0 ? counts[0] : 0;
  for (const int64_t c : counts)
    if (c != uniform_rows) uniform_rows = 0;
  if (uniform_rows > std::max<int64_t>(1, cache_.max_verify_rows) || order.num_decode_seqs < static_cast<int64_t>(num_seqs))
    uniform_rows = 0;
  size_t hidden_at = 0, logit_at = 0;
  gpu::StepRowsView rows = stage_common(tokens, first_positions, blocks, orows, order.num_decode_seqs, hidden_at, logit_at);
  rows.state_in = device<int32_t>(in_at);
  rows.state_out = device<int32_t>(out_at);
  rows.ring_first = device<int32_t>(ring_at);
  std::vector<const std::vector<kernels::DrawParams>*> draw_params;
  for (const SequenceStep& s : plan.sequences) draw_params.push_back(&s.draws);
  const StagedDraws draws = stage_draws(draw_params, out);
  DS_GPU_CHECK(gpuMemcpyAsync(staging_device_, pinned_->input(), staging_->used_bytes(), gpuMemcpyHostToDevice, stream_),
               "step staging, %zu bytes", staging_->used_bytes());

  const int64_t num_hidden = static_cast<int64_t>(orows.hidden_rows.size());
  const int64_t num_logits = static_cast<int64_t>(orows.logit_index.size());
  const int64_t num_captured = static_cast<int64_t>(plan.capture_layers.size());
  const int64_t before = launches_;
  if (graphs_.enabled() && uniform_rows > 0) {
    // Captured with the bucket's key bound so the graph serves every context in the bucket.
    rows.max_keys = rows.block_table_stride * cache_.kv_block_tokens;
    const gpu::StepGraphKey key{rows.num_seqs, uniform_rows, rows.block_table_stride, num_hidden, num_logits, plan.capture_layers};
    const int64_t nodes = graphs_.run(
        key, stream_, [&] { enqueue_trunk(rows, hidden_at, num_hidden, logit_at, num_logits, plan.capture_layers); });
    launches_ = before + nodes;  // a capture counted its launches without running them
  } else {
    enqueue_trunk(rows, hidden_at, num_hidden, logit_at, num_logits, plan.capture_layers);
  }
  draw_enqueue(draws, num_hidden, num_logits, num_captured);
  launches_last_forward_ = launches_ - before;
  lm_head_finish(num_hidden, num_logits, num_captured, draws, out);
  timeline_->end();
}

void GpuBackend::forward_mtp(const MtpPlan& plan, ForwardOutput& out) {
  if (!weights_->has_mtp) throw std::logic_error("this model has no MTP head");
  const ModelConfig& c = config_;
  const int64_t h = c.num_embd;
  int64_t n = 0, logit_rows = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const MtpSequenceStep& s = plan.sequences[i];
    const int64_t count = static_cast<int64_t>(s.tokens.size());
    if (count == 0 || static_cast<int64_t>(s.hidden.size()) != count * h)
      throw std::invalid_argument(plan_sequence_error(i, "MTP rows need one hidden vector per token"));
    if (s.num_logits < 0 || s.num_logits > count) throw std::invalid_argument(plan_sequence_error(i, "num_logits out of range"));
    if (!s.draws.empty() && static_cast<int32_t>(s.draws.size()) != s.num_logits)
      throw std::invalid_argument(plan_sequence_error(i, "draws must be one per logit row"));
    check_rows(i, s.tokens, s.num_cached_rows, s.kv_blocks);
    n += count;
    logit_rows += s.num_logits;
  }
  if (static_cast<int64_t>(plan.sequences.size()) > cache_.num_state_slots || n > max_rows_ || logit_rows > max_logit_rows_)
    throw std::invalid_argument("MTP plan: " + std::to_string(plan.sequences.size()) + " sequences, " + std::to_string(n) +
                                " rows, " + std::to_string(logit_rows) + " logit rows: over this GPU backend's bounds (" +
                                std::to_string(cache_.num_state_slots) + ", " + std::to_string(max_rows_) + ", " +
                                std::to_string(max_logit_rows_) + ")");
  DS_GPU_CHECK(gpuSetDevice(device_), "device %d", device_);
  timeline_->begin(stream_);
  staging_->clear();
  OutputRows orows;
  std::vector<const std::vector<int32_t>*> tokens, blocks;
  std::vector<int32_t> first_positions;
  out.begin_layout(config_.num_vocab);
  const size_t hidden_in_at = staging_->push<float>(n * h);
  float* hidden_in = staging_->host<float>(hidden_in_at);
  std::vector<int64_t> counts;
  std::vector<bool> prefill;
  for (const MtpSequenceStep& s : plan.sequences) {
    counts.push_back(static_cast<int64_t>(s.tokens.size()));
    prefill.push_back(is_prefill_chunk(static_cast<int64_t>(s.tokens.size()), false, kMtpPrefillMinRows));
  }
  const StagedOrder order = staged_order(counts, prefill);
  for (size_t j = 0; j < order.seqs.size(); ++j) {
    const MtpSequenceStep& s = plan.sequences[order.seqs[j]];
    std::memcpy(hidden_in + order.first_row[order.seqs[j]] * h, s.hidden.data(), s.hidden.size() * sizeof(float));
    tokens.push_back(&s.tokens);
    blocks.push_back(&s.kv_blocks);
    first_positions.push_back(s.num_cached_rows);
  }
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const MtpSequenceStep& s = plan.sequences[i];
    out.add_sequence(s.num_logits, s.num_logits, s.logits_to_host);  // MTP: hidden rows == logit rows
    add_output_rows(order.first_row[i], counts[i], s.num_logits, 0, orows.hidden_rows, orows.logit_index);
  }
  size_t hidden_at = 0, logit_at = 0;
  const gpu::StepRowsView rows = stage_common(tokens, first_positions, blocks, orows, order.num_decode_seqs, hidden_at, logit_at);
  std::vector<const std::vector<kernels::DrawParams>*> draw_params;
  for (const MtpSequenceStep& s : plan.sequences) draw_params.push_back(&s.draws);
  const StagedDraws draws = stage_draws(draw_params, out);
  DS_GPU_CHECK(gpuMemcpyAsync(staging_device_, pinned_->input(), staging_->used_bytes(), gpuMemcpyHostToDevice, stream_),
               "MTP staging, %zu bytes", staging_->used_bytes());

  // u = eh_proj [enorm(embedding) | hnorm(hidden)]: embedding first (MODEL.md 4.2).
  const gpu::GpuLayerContext ctx = context();
  const int64_t before = launches_;
  const gpu::GpuMtpWeights& mw = weights_->mtp;
  const gpu::DeviceTensor& emb = weights_->token_embd;
  DS_GPU_LAUNCH(ctx, 1, kernels::embedding_lookup_gpu(emb.data, emb.type, h, rows.tokens, n, ws_.a, stream_),
                "MTP embedding %lld rows", static_cast<long long>(n));
  gpu::rms_norm(ctx, mw.enorm, ws_.a, n, ws_.mtp_cat, 2 * h);
  gpu::rms_norm(ctx, mw.hnorm, device<float>(hidden_in_at), n, ws_.mtp_cat + h, 2 * h);
  gpu::matmul(ctx, mw.eh_proj, ws_.mtp_cat, n, ws_.x);
  run_block(mw.layer, &mtp_kv_, nullptr, rows);
  const int64_t num_hidden = static_cast<int64_t>(orows.hidden_rows.size());
  const int64_t num_logits = static_cast<int64_t>(orows.logit_index.size());
  lm_head_enqueue(mw.shared_head_norm, device<int32_t>(hidden_at), num_hidden, device<int32_t>(logit_at), num_logits, 0);
  draw_enqueue(draws, num_hidden, num_logits, 0);
  launches_last_forward_ = launches_ - before;
  lm_head_finish(num_hidden, num_logits, 0, draws, out);
  timeline_->end();
}

}  // namespace deltaserve::runtime
