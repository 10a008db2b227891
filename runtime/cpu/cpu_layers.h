// The CPU backend's layer functions, shared by cpu_backend.cpp and the MTP head. Internal to
// runtime/cpu: every function runs on the engine thread and spreads work over the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/parallel.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace deltaserve::runtime::cpu {

// One sequence's run of rows inside the step's row matrix.
struct SequenceRows {
  int64_t row_begin = 0;
  int64_t num_rows = 0;
  int32_t slot = 0;
  int32_t first_position = 0;             // position of the first row
  const std::vector<int32_t>* kv_blocks = nullptr;
  bool keep_row_states = false;  // verify rows: snapshot the recurrent state after each row
  int32_t state_entry = 0;        // GDN state entry the rows start from (and update in place)
  int32_t ring_first = -1;        // verify rows: the state after row t goes to entry ring_first + t
};

// Every row of a step: positions[r] is row r's position in its own sequence.
struct StepRows {
  std::vector<SequenceRows> sequences;
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  int64_t num_rows() const { return static_cast<int64_t>(tokens.size()); }
};

// One attention layer's paged cache: [num_blocks][block_tokens][num_kv_heads][head_dim].
struct KvLayer {
  std::vector<float> k;
  std::vector<float> v;
};

// One GDN layer's recurrent state entries (CpuBackend owns the entry bookkeeping: slot s owns
// entries [s * E, (s + 1) * E), E = 1, or two banks of max_verify_rows when verify steps keep
// row states; the GPU backend's scheme, so a rollback moves an index and copies nothing).
struct GdnStateLayer {
  std::vector<float> conv;   // [entries][Kc - 1][Dc]
  std::vector<float> delta;  // [entries][Hv][dk][dv]
};

struct LayerContext {
  const ModelConfig& config;
  const kernels::ParallelFor& pool;
  int64_t kv_block_tokens;
  // GDN prefill rows (sequences without keep_row_states) in the chunked form (CacheConfig::gdn_prefill
  // kChunked); verify and decode rows always run recurrent.
  bool gdn_chunked_prefill = false;
};

// y[r] = W x[r] for a ggml {in, out} matrix (expert e of a {in, out, E} stack if e >= 0).
void matmul(const LayerContext& ctx, const TensorView& w, const float* x, int64_t num_rows,
            float* y, int64_t expert = -1, bool accumulate = false);

// Mixers: read the normed rows a [N][H], write y [N][H].
void gdn_forward(const LayerContext& ctx, const GdnWeights& w, GdnStateLayer& state,
                 const StepRows& rows, const float* a, float* y);
void attention_forward(const LayerContext& ctx, const AttentionWeights& w, KvLayer& cache,
                       const StepRows& rows, const float* a, float* y);
// FFN: dense SwiGLU or MoE with shared expert, by ctx.config.arch.
void ffn_forward(const LayerContext& ctx, const FfnWeights& w, int64_t num_rows, const float* b,
                 float* y);

const float* f32_data(const TensorView& t);

}  // namespace deltaserve::runtime::cpu
